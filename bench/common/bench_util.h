// Timing and roofline helpers shared by the GPU benchmarks.
#ifndef SPAR_BENCH_COMMON_BENCH_UTIL_H_
#define SPAR_BENCH_COMMON_BENCH_UTIL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/common/smem_residency.h"

namespace spar::bench {

inline void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// n elements of T on the device (plus 256 bytes of slack); exits on
// failure (cudaFree it).
template <typename T>
T* DeviceAlloc(size_t n) {
  T* p = nullptr;
  CheckCuda(cudaMalloc(&p, n * sizeof(T) + 256), "cudaMalloc");
  return p;
}

// Median time in microseconds of `fn` (which enqueues work on `stream`),
// timed with CUDA events after `warmup` untimed calls.
inline double MedianMicros(const std::function<void()>& fn, int warmup = 5, int reps = 50,
                           cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  CheckCuda(cudaStreamSynchronize(stream), "warmup");
  cudaEvent_t a, b;
  CheckCuda(cudaEventCreate(&a), "event");
  CheckCuda(cudaEventCreate(&b), "event");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    CheckCuda(cudaEventRecord(a, stream), "record");
    fn();
    CheckCuda(cudaEventRecord(b, stream), "record");
    CheckCuda(cudaEventSynchronize(b), "sync");
    float ms = 0;
    CheckCuda(cudaEventElapsedTime(&ms, a, b), "elapsed");
    times.push_back(ms * 1000.0);
  }
  CheckCuda(cudaGetLastError(), "timed kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median microseconds per call of `fn(i)` (i: the call's index, e.g. for
// rotating inputs) replayed from a CUDA graph: `per_graph` calls captured
// back to back on `stream` (a non-legacy stream), the graph replayed `reps`
// times. The GPU time a serving engine's replayed decode step pays, without
// the host launch latency that per-launch event timing adds to small
// kernels.
inline double GraphMedianMicros(const std::function<void(int)>& fn, cudaStream_t stream, int per_graph = 20,
                                int reps = 9) {
  for (int i = 0; i < 2; ++i) fn(i);  // warm-up (lazy loading, attributes)
  CheckCuda(cudaStreamSynchronize(stream), "warmup");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < per_graph; ++i) fn(i);
  CheckCuda(cudaStreamEndCapture(stream, &graph), "end capture");
  CheckCuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double us = MedianMicros([&] { CheckCuda(cudaGraphLaunch(exec, stream), "replay"); }, 2, reps, stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us / per_graph;
}

// Device-to-device copy bandwidth in GB/s, counting bytes read plus written
// (1 GiB buffers: far beyond L2), the roofline every benchmark reports against.
inline double MeasureCopyBandwidthGBs() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  CheckCuda(cudaMalloc(&src, bytes), "malloc");
  CheckCuda(cudaMalloc(&dst, bytes), "malloc");
  CheckCuda(cudaMemset(src, 1, bytes), "memset");
  const double us = MedianMicros([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); }, 3, 20);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

// Flushes L2 between timed runs where a benchmark's inputs would fit in it.
class L2Flusher {
 public:
  L2Flusher() { CheckCuda(cudaMalloc(&buf_, kBytes), "malloc"); }
  ~L2Flusher() { cudaFree(buf_); }
  void Flush(cudaStream_t stream = nullptr) { cudaMemsetAsync(buf_, 0, kBytes, stream); }

 private:
  static constexpr size_t kBytes = size_t{256} << 20;
  void* buf_ = nullptr;
};

// The GPU's name, and the shared memory an SM is run as when that is
// emulated (SPAR_SMEM_PER_SM_KB, kernels/cuda/common/smem_residency.h), so
// every log says which residency its figures had.
inline std::string DeviceName() {
  cudaDeviceProp prop;
  CheckCuda(cudaGetDeviceProperties(&prop, 0), "props");
  const int64_t emulated = EmulatedSmemPerSm();
  if (emulated <= 0) return prop.name;
  return std::string(prop.name) + " [shared memory an SM emulated: " + std::to_string(emulated / 1024) + " KB]";
}

// --moe-bias RANGE of gemm_bench and w4a16_bench (the routing bias's range,
// for uneven routing): false, after a message naming the flag and the
// value, unless `text` is a number in [0, 100]; checked before any device
// work, so a typo never runs a sweep.
inline bool ParseMoeBias(const char* text, double* range) {
  char* end = nullptr;
  const double b = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(b >= 0 && b <= 100)) {
    std::fprintf(stderr, "--moe-bias: '%s' is not a number in [0, 100]\n", text);
    return false;
  }
  *range = b;
  return true;
}

// How evenly an MoE bench's routing came out, from its expert offsets
// (num_experts + 1 prefix sums of rows): the experts hit, the mean and most
// rows of a hit expert, printed as one "routing moe M=..." line (the device
// scripts grep it), with the routing's bias range (< 0: even routing).
// Returns the experts hit.
inline int PrintMoeRouting(int64_t tokens, const std::vector<int32_t>& offsets, double bias_range) {
  int hit = 0, most = 0;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    hit += offsets[e + 1] > offsets[e];
    most = std::max(most, offsets[e + 1] - offsets[e]);
  }
  std::printf("  routing moe M=%lld: %d experts hit, rows per expert mean %.1f max %d", static_cast<long long>(tokens),
              hit, static_cast<double>(offsets.back()) / std::max(hit, 1), most);
  if (bias_range < 0) {
    std::printf(" (even)\n");
  } else {
    std::printf(" (bias range %g)\n", bias_range);
  }
  return hit;
}

}  // namespace spar::bench

#endif  // SPAR_BENCH_COMMON_BENCH_UTIL_H_
