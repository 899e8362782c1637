// What a last-block handoff costs a launch (CUDA-graph replays, us per
// launch) at 1-128 blocks of 256 threads: blocks that only write 8 ints; the
// same plus the arrival of kernels/cuda/common/grid_arrival.cuh and the last
// block reading every block's ints through L2; the same with the fences it
// replaced (__threadfence in every thread before and after); the arrival
// alone. Not part of the build; on this machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_90 -I. \
//     -o /tmp/arrival_probe tools/device/probes/arrival_probe.cu
// then run the binary on the GPU host (cudart is linked statically). Timed
// with bench/common/bench_util.h's GraphMedianMicros (50 launches a graph).
#include <cstdint>
#include <cstdio>

#include "bench/common/bench_util.h"
#include "kernels/cuda/common/grid_arrival.cuh"

namespace spar {
namespace {

using bench::CheckCuda;

// kMode 0: each block writes 8 ints and exits. 1: + the arrival, the last
// block reads every block's ints and writes their sum. 2: mode 1 with the
// fences the arrival replaced (__threadfence in every thread before and
// after). 3: mode 1 without the reads.
template <int kMode>
__global__ void __launch_bounds__(256) Handoff(int* ids, int* out, int32_t* done) {
  __shared__ int is_last;
  if (threadIdx.x < 8) ids[blockIdx.x * 8 + threadIdx.x] = blockIdx.x * 31 + threadIdx.x;
  if (kMode == 0) return;
  if (kMode == 2) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(done, 1) == static_cast<int>(gridDim.x) - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
  } else if (!cuda::ArriveIsLast(done, static_cast<int32_t>(gridDim.x), is_last)) {
    return;
  }
  if (kMode != 3) {
    int s = 0;
    for (int i = threadIdx.x; i < static_cast<int>(gridDim.x) * 8; i += 256) s += __ldcg(ids + i);
    out[threadIdx.x] = s;
  }
  if (threadIdx.x == 0) *done = 0;
}

template <int kMode>
double Time(int blocks, int* ids, int* out, int32_t* done, cudaStream_t st) {
  return bench::GraphMedianMicros(
      [&](int) {
        Handoff<kMode><<<blocks, 256, 0, st>>>(ids, out, done);
        CheckCuda(cudaGetLastError(), "Handoff");
      },
      st, /*per_graph=*/50, /*reps=*/20);
}

}  // namespace
}  // namespace spar

int main() {
  using namespace spar;
  int* ids = bench::DeviceAlloc<int>(1 << 18);
  int* out = bench::DeviceAlloc<int>(256);
  int32_t* done = bench::DeviceAlloc<int32_t>(1);
  CheckCuda(cudaMemset(done, 0, 4), "memset");
  cudaStream_t st;
  CheckCuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  std::printf("| blocks | write only | + arrival, last reads (acq_rel) | + arrival, last reads (SC fences, old) | "
              "+ arrival only (acq_rel) |\n|---|---|---|---|---|\n");
  for (int n : {1, 8, 64, 128}) {
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f |\n", n, Time<0>(n, ids, out, done, st), Time<1>(n, ids, out, done, st),
                Time<2>(n, ids, out, done, st), Time<3>(n, ids, out, done, st));
  }
  int d = -1;
  CheckCuda(cudaMemcpy(&d, done, 4, cudaMemcpyDeviceToHost), "counter");
  std::printf("counter left %d\n", d);
  return 0;
}
