// What a last-block handoff costs a launch (CUDA-graph replays, us per
// launch) at 1-128 blocks of 256 threads: blocks that only write 8 ints; the
// same plus the arrival of kernels/cuda/common/grid_arrival.cuh and the last
// block reading every block's ints through L2; the same with the fences it
// replaced (__threadfence in every thread before and after); the arrival
// alone. Not part of the build; on this machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_90 -I. \
//     -o /tmp/arrival_probe tools/device/probes/arrival_probe.cu
// then run the binary on the GPU host (cudart is linked statically).
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include "kernels/cuda/common/grid_arrival.cuh"
using namespace spar;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// mode 0: each block writes 8 ints and exits. 1: + arrival (acq_rel), last block reads all and writes.
// 2: old pattern (every thread __threadfence before and after). 3: mode 1 + the last block only arrives (no reads).
template <int kMode>
__global__ void __launch_bounds__(256) Handoff(int* ids, int* out, int32_t* done) {
  __shared__ int is_last;
  if (threadIdx.x < 8) ids[blockIdx.x * 8 + threadIdx.x] = blockIdx.x * 31 + threadIdx.x;
  if (kMode == 0) return;
  if (kMode == 2) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(done, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
  } else {
    if (!cuda::ArriveIsLast(done, (int32_t)gridDim.x, is_last)) return;
  }
  if (kMode == 3) { if (threadIdx.x == 0) *done = 0; return; }
  int s = 0;
  for (int i = threadIdx.x; i < gridDim.x * 8; i += 256) s += __ldcg(ids + i);
  out[threadIdx.x] = s;
  if (threadIdx.x == 0) *done = 0;
}

template <int kMode>
float TimeGraph(int blocks, int* ids, int* out, int32_t* done, cudaStream_t st) {
  cudaGraph_t g; cudaGraphExec_t ge;
  const int per = 50;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < per; ++i) Handoff<kMode><<<blocks, 256, 0, st>>>(ids, out, done);
  cudaStreamEndCapture(st, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < 25; ++r) {
    cudaEventRecord(a, st); cudaGraphLaunch(ge, st); cudaEventRecord(b, st); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 5) t.push_back(ms * 1000.f / per);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return t[t.size() / 2];
}

int main() {
  int *ids, *out; int32_t* done; cudaStream_t st;
  CK(cudaMalloc(&ids, 1 << 20)); CK(cudaMalloc(&out, 4096)); CK(cudaMalloc(&done, 4)); CK(cudaMemset(done, 0, 4));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("| blocks | write only | + arrival, last reads (acq_rel) | + arrival, last reads (SC fences, old) | + arrival only (acq_rel) |\n|---|---|---|---|---|\n");
  for (int n : {1, 8, 64, 128}) {
    float t0 = TimeGraph<0>(n, ids, out, done, st), t1 = TimeGraph<1>(n, ids, out, done, st);
    float t2 = TimeGraph<2>(n, ids, out, done, st), t3 = TimeGraph<3>(n, ids, out, done, st);
    printf("| %d | %.2f | %.2f | %.2f | %.2f |\n", n, t0, t1, t2, t3);
  }
  CK(cudaDeviceSynchronize());
  int d; CK(cudaMemcpy(&d, done, 4, cudaMemcpyDeviceToHost)); printf("counter left %d\n", d);
  return 0;
}
