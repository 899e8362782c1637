// What the glue of a decode step costs on the GPU, apart from the kernels'
// own work: an empty kernel; the same with a stream-ordered allocation and
// free around it (the cuda backend's temporaries); with a timing event
// recorded before it (the op profile's marks). Each variant runs 256 times
// back to back, eagerly behind a 5 ms GPU wait (so host enqueueing is
// hidden) and as a replayed CUDA graph; printed: GPU microseconds per
// repetition, medians of 11 runs. The differences to the empty kernel are
// the per-op prices that the engine's op profile and decode graphs pay.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

#define CHECK(x)                                                                              \
  do {                                                                                        \
    const cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__global__ void EmptyKernel(int* p) {
  if (p != nullptr && threadIdx.x == 1024) *p = 0;  // never true: keeps the argument live
}

__global__ void WaitKernel(long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
    __nanosleep(1000);
  }
}

constexpr int kReps = 256;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One repetition of the variant's stream work.
using Work = std::function<void(cudaStream_t, std::vector<cudaEvent_t>*)>;

double TimeEager(cudaStream_t s, const Work& work) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> runs;
  std::vector<cudaEvent_t> marks;
  for (int r = 0; r < 12; ++r) {
    WaitKernel<<<1, 1, 0, s>>>(5'000'000);
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < kReps; ++i) work(s, &marks);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) runs.push_back(ms * 1e3 / kReps);
    for (cudaEvent_t e : marks) CHECK(cudaEventDestroy(e));
    marks.clear();
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return Median(runs);
}

double TimeGraph(cudaStream_t s, const Work& work) {
  std::vector<cudaEvent_t> marks;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kReps; ++i) work(s, &marks);
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> runs;
  for (int r = 0; r < 12; ++r) {
    WaitKernel<<<1, 1, 0, s>>>(1'000'000);
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) runs.push_back(ms * 1e3 / kReps);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  for (cudaEvent_t e : marks) CHECK(cudaEventDestroy(e));
  return Median(runs);
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;  // as the cuda backend sets it
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  struct Variant {
    const char* name;
    Work work;
    bool graph;  // events cannot be captured as timing marks
  };
  const Work empty = [](cudaStream_t st, std::vector<cudaEvent_t>*) { EmptyKernel<<<1, 128, 0, st>>>(nullptr); };
  const Work alloc = [](cudaStream_t st, std::vector<cudaEvent_t>*) {
    void* p = nullptr;
    CHECK(cudaMallocAsync(&p, 256 << 10, st));
    EmptyKernel<<<1, 128, 0, st>>>(static_cast<int*>(p));
    CHECK(cudaFreeAsync(p, st));
  };
  const Work alloc4 = [](cudaStream_t st, std::vector<cudaEvent_t>*) {
    void* p[4];
    for (auto& q : p) CHECK(cudaMallocAsync(&q, 64 << 10, st));
    EmptyKernel<<<1, 128, 0, st>>>(static_cast<int*>(p[0]));
    for (auto& q : p) CHECK(cudaFreeAsync(q, st));
  };
  const Work event = [](cudaStream_t st, std::vector<cudaEvent_t>* marks) {
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(e, st));
    marks->push_back(e);
    EmptyKernel<<<1, 128, 0, st>>>(nullptr);
  };
  const Variant variants[] = {{"empty kernel", empty, true},
                              {"malloc+kernel+free", alloc, true},
                              {"4 mallocs+kernel+4 frees", alloc4, true},
                              {"event record+kernel", event, false}};
  // Warm the pool so that no variant pays its growth.
  TimeEager(s, alloc4);
  std::printf("| per repetition (%d back to back) | eager us | graph us |\n|---|---|---|\n", kReps);
  for (const Variant& v : variants) {
    const double eager = TimeEager(s, v.work);
    if (v.graph) {
      std::printf("| %s | %.2f | %.2f |\n", v.name, eager, TimeGraph(s, v.work));
    } else {
      std::printf("| %s | %.2f | - |\n", v.name, eager);
    }
  }
  CHECK(cudaStreamDestroy(s));
  return 0;
}
