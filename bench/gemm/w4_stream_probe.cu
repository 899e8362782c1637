// What bounds the W4A16 streaming kernel (kernels/cuda/gemm/w4a16_stream.cu)
// at ~62 % of the copy roofline at one token: its weight reads, replayed
// without its arithmetic.
//
// Sessions 24-27 found the kernel neither issue-bound (~30 % of the issue
// slots) nor helped by more bytes in flight (deeper rounds, five warps a
// block, a shared-memory ring). Left: the memory system's answer to its
// access pattern. Each warp of a block streams its own contiguous range of
// every fragment's 512-byte chunks, so a block keeps kMI x kWarps streams a
// few KB apart in flight and the GPU ~3000 of them. These probes read the
// same packed bytes with the same grid, block width and round depth, with
// the blocks an SM holds capped to the kernel's (16 warps: its registers),
// and report % of copy:
//   kernel order  warp w reads chunks [w C / W, (w + 1) C / W) of each of
//                 its block's fragments, kDepth a round (the kernel's order);
//   + side loads  the same with each chunk's activations and int4 scales and
//                 zero points, as the kernel loads them;
//   interleaved   warp w reads chunks w, w + W, w + 2W, ... (a block's warps
//                 read each fragment's consecutive 2 KB together);
//   uncapped      the kernel's order with as many blocks an SM as fit;
//   plain read    the same bytes as one contiguous stream, same grid.
// Bytes counted: the values only (the side data adds ~8 % for int4).
// If "kernel order" stays near the kernel's ~62 % the pattern is the bound
// and a chunk order that keeps a block's reads together is the next layout
// to try; if it reaches the plain read's ~95 % the bound is on the SM side.
// Answer (H100 running sm80 code, 2026-12-06, bench/RESULTS.md "What holds
// the W4A16 streaming kernel"): the kernel order reads the 12288 x 6144
// values at 76.7 % and the kernel runs at 76.5 % over its bytes: the
// pattern. Interleaved reads 85.8 %, but neither an interleaved K split in
// the kernel nor chunks ordered across rows made the TP 8 shapes faster.
#include "bench/gemm/w4_stream_probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/common/bench_util.h"
#include "kernels/cuda/common/load_streamed.cuh"

namespace spar::bench {
namespace {

constexpr int kChunkBytes = 512;

// The int4 side data the kernel loads with each chunk (kSide): its token's
// 32 activation bytes (through L1) and, per fragment, the scales and zero
// points of rows g and g + 8 (group-major [k / 128][rows], as w4_layout.h).
struct SideData {
  const uint16_t* x = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;
  int64_t rows = 0;
};

// Block b: fragments [b kMI, (b + 1) kMI) of `chunks` chunks each (fragment
// f's chunks contiguous from f * chunks * 512); warp w of kWarps; lane L the
// 16 bytes at 16 L of a chunk. Rounds of kDepth chunks of every fragment:
// all loads, then an XOR of them (the kernel's products stand in).
template <int kWarps, int kMI, int kDepth, bool kInterleaved, bool kSide>
__global__ void W4ChunkReadKernel(const uint8_t* __restrict__ w, int64_t chunks, SideData side,
                                  uint32_t* __restrict__ out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const uint8_t* base = w + static_cast<int64_t>(blockIdx.x) * kMI * chunks * kChunkBytes + lane * 16;
  const int64_t c_begin = kInterleaved ? warp : warp * chunks / kWarps;
  const int64_t c_end = kInterleaved ? chunks : (warp + 1) * chunks / kWarps;
  const int64_t step = kInterleaved ? kWarps : 1;
  const int64_t row_lo = static_cast<int64_t>(blockIdx.x) * kMI * 16 + g;
  uint32_t acc = 0;
  for (int64_t c = c_begin; c < c_end; c += kDepth * step) {
    uint4 v[kDepth][kMI], xa[kDepth], xb[kDepth];
    float s[kDepth][kMI][2];
    uint32_t z[kDepth][kMI][2];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int64_t cc = c + d * step < c_end ? c + d * step : c_begin;
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) v[d][mi] = cuda::LoadStreamed16(base + (mi * chunks + cc) * kChunkBytes);
      if constexpr (kSide) {
        const uint16_t* xp = side.x + cc * 64 + t * 16;
        xa[d] = __ldg(reinterpret_cast<const uint4*>(xp));
        xb[d] = __ldg(reinterpret_cast<const uint4*>(xp + 8));
        const int64_t meta = (cc / 2) * side.rows + row_lo;  // group 128: two chunks
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          s[d][mi][0] = __ldg(side.scales + meta + mi * 16);
          s[d][mi][1] = __ldg(side.scales + meta + mi * 16 + 8);
          z[d][mi][0] = __ldg(side.zeros + meta + mi * 16);
          z[d][mi][1] = __ldg(side.zeros + meta + mi * 16 + 8);
        }
      }
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        acc ^= v[d][mi].x ^ v[d][mi].y ^ v[d][mi].z ^ v[d][mi].w;
        if constexpr (kSide) acc ^= __float_as_uint(s[d][mi][0]) ^ __float_as_uint(s[d][mi][1]) ^ z[d][mi][0] ^ z[d][mi][1];
      }
      if constexpr (kSide) acc ^= xa[d].x ^ xa[d].w ^ xb[d].y ^ xb[d].z;
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// The same bytes as one contiguous stream over the same grid: block b reads
// its kMI fragments' bytes, its threads 16 bytes apart, kDepth x kMI loads a
// round.
template <int kWarps, int kMI, int kDepth>
__global__ void PlainReadKernel(const uint8_t* __restrict__ w, int64_t chunks, SideData, uint32_t* __restrict__ out) {
  const int64_t bytes = kMI * chunks * kChunkBytes;
  const uint8_t* base = w + static_cast<int64_t>(blockIdx.x) * bytes;
  constexpr int kThreads = kWarps * 32, kPerRound = kDepth * kMI;
  uint32_t acc = 0;
  for (int64_t o = threadIdx.x * 16; o < bytes; o += int64_t{kThreads} * 16 * kPerRound) {
    uint4 v[kPerRound];
#pragma unroll
    for (int i = 0; i < kPerRound; ++i) {
      const int64_t oo = o + int64_t{i} * kThreads * 16;
      v[i] = cuda::LoadStreamed16(base + (oo < bytes ? oo : o));
    }
#pragma unroll
    for (int i = 0; i < kPerRound; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Dynamic shared memory (the kernels declare none: it is only reserved) that
// lets at most `blocks` blocks share an SM (0: no cap), and the blocks an SM
// then holds.
template <class Kernel>
int CapBlocks(Kernel kernel, int threads, int blocks, size_t* smem) {
  int dev = 0, per_sm = 0, reserved = 0;
  CheckCuda(cudaGetDevice(&dev), "device");
  CheckCuda(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev), "smem per SM");
  CheckCuda(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev), "reserved smem");
  *smem = blocks > 0 ? static_cast<size_t>(per_sm / (blocks + 1) - reserved + 1024) : 0;
  CheckCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(*smem)),
            "smem attribute");
  int held = 0;
  CheckCuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&held, kernel, threads, *smem), "occupancy");
  return held;
}

struct ProbeShape {
  const char* name;
  int64_t rows, cols;  // the packed int4 matrix (rows a multiple of 16 kMI)
};

template <int kWarps, int kMI, int kDepth>
void ProbeShapeWith(const char* config, const ProbeShape& s, double copy_gbs, cudaStream_t stream) {
  const int64_t chunks = s.cols / 64;
  const int64_t bytes = s.rows * s.cols / 2;
  const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / bytes + 1));
  const int64_t groups = s.cols / 128;
  std::vector<uint8_t*> bufs, zeros;
  std::vector<float*> scales;
  for (int c = 0; c < copies; ++c) {
    bufs.push_back(DeviceAlloc<uint8_t>(bytes));
    CheckCuda(cudaMemset(bufs.back(), 0x5a + c, bytes), "memset");
    scales.push_back(DeviceAlloc<float>(groups * s.rows));
    CheckCuda(cudaMemset(scales.back(), 0x3c, groups * s.rows * sizeof(float)), "memset");
    zeros.push_back(DeviceAlloc<uint8_t>(groups * s.rows));
    CheckCuda(cudaMemset(zeros.back(), 0x07, groups * s.rows), "memset");
  }
  uint16_t* x = DeviceAlloc<uint16_t>(s.cols);
  CheckCuda(cudaMemset(x, 0x3f, s.cols * 2), "memset");
  const int grid = static_cast<int>(s.rows / (16 * kMI));
  constexpr int kThreads = kWarps * 32;
  uint32_t* out = DeviceAlloc<uint32_t>(static_cast<size_t>(grid) * kThreads);
  CheckCuda(cudaDeviceSynchronize(), "probe buffers");
  const int cap = 16 / kWarps;  // the kernel's blocks an SM (16 warps: 128 registers a thread)
  auto run = [&](const char* what, auto kernel, int cap_blocks) {
    size_t smem = 0;
    const int held = CapBlocks(kernel, kThreads, cap_blocks, &smem);
    const double us = GraphMedianMicros(
        [&](int i) {
          const SideData side{x, scales[i % copies], zeros[i % copies], s.rows};
          kernel<<<grid, kThreads, smem, stream>>>(bufs[i % copies], chunks, side, out);
        },
        stream, 20, 9);
    CheckCuda(cudaGetLastError(), what);
    const double gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("probe %-16s %-10s %-13s %3d blocks/SM: %8.2f us  %7.1f GB/s  %5.1f%% of copy\n", s.name, config, what,
                held, us, gbs, 100.0 * gbs / copy_gbs);
  };
  run("kernel order", W4ChunkReadKernel<kWarps, kMI, kDepth, false, false>, cap);
  run("+ side loads", W4ChunkReadKernel<kWarps, kMI, kDepth, false, true>, cap);
  run("interleaved", W4ChunkReadKernel<kWarps, kMI, kDepth, true, false>, cap);
  run("uncapped", W4ChunkReadKernel<kWarps, kMI, kDepth, false, false>, 0);
  run("plain read", PlainReadKernel<kWarps, kMI, kDepth>, cap);
  for (int c = 0; c < copies; ++c) {
    cudaFree(bufs[c]);
    cudaFree(scales[c]);
    cudaFree(zeros[c]);
  }
  cudaFree(x);
  cudaFree(out);
}

}  // namespace

void RunW4StreamProbes(double copy_gbs, cudaStream_t stream) {
  std::printf("\n## W4A16 streaming kernel's weight reads without arithmetic (int4 values only; %% of copy)\n");
  // The planner's configurations at one token (w4a16_gemm.cu StreamConfigFor, 132 SMs).
  ProbeShapeWith<4, 2, 3>("W4SM2D3W4", {"dense_gate_tp1", 12288, 6144}, copy_gbs, stream);
  ProbeShapeWith<4, 2, 3>("W4SM2D3W4", {"q_b_tp1", 16384, 2048}, copy_gbs, stream);
  ProbeShapeWith<4, 1, 4>("W4SM1D4W4", {"o_proj_tp1", 6144, 16384}, copy_gbs, stream);
  ProbeShapeWith<8, 1, 4>("W4SM1D4W8", {"expert_gate_up", 4096, 6144}, copy_gbs, stream);
}

}  // namespace spar::bench
