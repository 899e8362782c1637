// gemm_bench --probe (memory_probes.h): kernels that read like the decode
// GEMMs but do no arithmetic, and an empty kernel.
#include "bench/gemm/memory_probes.h"

#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/common/bench_util.h"

namespace spar::bench {
namespace {

// Every thread sums 16-byte words of a buffer far larger than L2 (the same
// non-allocating loads the stream kernel uses) and writes one word, so the
// time is the read-only DRAM ceiling a decode GEMM could reach.
__global__ void ReadStreamKernel(const uint4* __restrict__ src, size_t n16, uint32_t* __restrict__ out) {
  uint32_t acc = 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(src + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) acc ^= src[i].x;
  out[blockIdx.x * size_t{blockDim.x} + threadIdx.x] = acc;
}

// The stream kernel's access pattern without its arithmetic: warp w of W
// reads units [w*U/W, (w+1)*U/W) of (16-row group, 128-byte piece of K),
// lane (g, t) 16 bytes at 16t and 64 + 16t of rows g and g + 8, 4 units per
// step. Tells whether the GEMM's row-strided pattern or its instructions
// limit it.
__global__ void ReadUnitsKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t row_bytes,
                                uint32_t* __restrict__ out) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t per_row = row_bytes / 128;
  const int64_t total = rows / 16 * per_row;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  const int64_t gw = int64_t{blockIdx.x} * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int64_t x0 = gw * total / warps, x1 = (gw + 1) * total / warps;
  uint32_t acc = 0;
  for (int64_t x = x0; x < x1; x += 4) {
    uint4 v[4][4];
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      const int64_t xx = x + d < x1 ? x + d : x1 - 1;
      const int64_t grp = xx / per_row, u = xx - grp * per_row;
      const uint8_t* a = w + (grp * 16 + g) * row_bytes + u * 128 + 16 * t;
      const uint8_t* b = a + 8 * row_bytes;
      const uint8_t* src[4] = {a, a + 64, b, b + 64};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v[d][i].x), "=r"(v[d][i].y), "=r"(v[d][i].z), "=r"(v[d][i].w)
                     : "l"(src[i]));
      }
    }
#pragma unroll
    for (int d = 0; d < 4; ++d)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc ^= v[d][i].x ^ v[d][i].y ^ v[d][i].z ^ v[d][i].w;
  }
  out[blockIdx.x * size_t{blockDim.x} + threadIdx.x] = acc;
}

__global__ void EmptyKernel() {}

}  // namespace

void RunMemoryProbes(int sms, cudaStream_t stream, double copy_gbs) {
  // 75.5 MB (the 12288 x 6144 e4m3 weight) rotated over 6 copies, and 1 GiB.
  for (size_t bytes : {size_t{75497472}, size_t{1} << 30}) {
    const int copies = bytes < (size_t{256} << 20) ? 6 : 1;
    std::vector<uint8_t*> bufs;
    for (int c = 0; c < copies; ++c) {
      bufs.push_back(DeviceAlloc<uint8_t>(bytes));
      CheckCuda(cudaMemset(bufs.back(), c + 1, bytes), "memset");
    }
    uint32_t* out = DeviceAlloc<uint32_t>(static_cast<size_t>(sms) * 16 * 256);
    CheckCuda(cudaDeviceSynchronize(), "probe buffers");
    for (int per_sm : {4, 8, 16}) {
      const double us = GraphMedianMicros(
          [&](int i) {
            ReadStreamKernel<<<sms * per_sm, 256, 0, stream>>>(reinterpret_cast<const uint4*>(bufs[i % copies]),
                                                               bytes / 16, out);
          },
          stream, 20, 7);
      std::printf("probe read-only stream %zu MB, %d x 256 threads per SM: %.2f us, %.0f GB/s (%.1f%% of copy)\n",
                  bytes >> 20, per_sm, us, bytes / us * 1e-3, 100.0 * bytes / us * 1e-3 / copy_gbs);
    }
    if (copies > 1) {  // 12288 x 6144 rows, the GEMM's pattern
      for (int per_sm : {4, 8}) {
        const double us = GraphMedianMicros(
            [&](int i) { ReadUnitsKernel<<<sms * per_sm, 128, 0, stream>>>(bufs[i % copies], 12288, 6144, out); },
            stream, 20, 7);
        std::printf("probe read 16-row x 128 B units (12288 x 6144), %d x 128 threads per SM: %.2f us, %.0f GB/s "
                    "(%.1f%% of copy)\n",
                    per_sm, us, bytes / us * 1e-3, 100.0 * bytes / us * 1e-3 / copy_gbs);
      }
    }
    for (auto* b : bufs) cudaFree(b);
    cudaFree(out);
  }
  for (int blocks : {1, sms * 4}) {
    constexpr int kLaunches = 50;
    const double us = GraphMedianMicros([&](int) { EmptyKernel<<<blocks, 128, 0, stream>>>(); }, stream, kLaunches, 7);
    // Enqueued one by one from the host: batches of kLaunches, median batch.
    const double us_stream = MedianMicros(
                                 [&] {
                                   for (int i = 0; i < kLaunches; ++i) EmptyKernel<<<blocks, 128, 0, stream>>>();
                                 },
                                 3, 7, stream) /
                             kLaunches;
    std::printf("probe empty kernel, %d blocks: %.2f us per launch in a graph, %.2f us enqueued one by one\n", blocks,
                us, us_stream);
  }
}

}  // namespace spar::bench
