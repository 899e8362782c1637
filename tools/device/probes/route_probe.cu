// Where the multi-token route + permute launch spends its time (CUDA-graph
// replays, us per launch; 256 experts, top-8, two work lists): the whole
// launch, the routing blocks with their arrival but no permutation, the
// routing alone (MoeRouteKernel), and the permutation block alone on ids
// already in memory (its general instance: the one every tree has, so the
// column compares across trees; the launch itself runs the decode instance
// at up to 256 experts and 1,024 pairs since session 40). It includes
// moe_kernels.cu itself to reach the kernels' internal pieces
// (RouteTokenBlock, PermuteBlock), so it measures whatever tree it is
// compiled in; to compare two, put the other moe_kernels.cu under
// DIR/kernels/cuda/gemm/ and add -IDIR first. Not part of the build; on this
// machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_90 --expt-relaxed-constexpr \
//     -I. -Ibuild-cuda -o /tmp/route_probe tools/device/probes/route_probe.cu
// Timed with bench/common/bench_util.h's GraphMedianMicros (50 launches a
// graph). It also times the whole launch's permutation block step by step
// (clock64 of its thread 0 at its entry, after its barriers and at its end,
// through the SPAR_PERMUTE_STEP hook; mean cycles over every launch of the
// timing).
#include <cuda_runtime.h>

namespace spar::probe {
constexpr int kSteps = 6;  // PermuteBlock's SPAR_PERMUTE_STEP(0 .. kSteps - 1)
// Cycles from PermuteBlock's step n - 1 to step n, summed over launches
// ([0]: launches). The steps' clocks wait in shared memory and go out at the
// last step, so the probe puts no global traffic inside the chain it times.
__device__ unsigned long long g_step_cycles[kSteps];
__device__ __forceinline__ void Step(int n) {
  __shared__ long long at[kSteps];
  if (threadIdx.x != 0) return;
  at[n] = clock64();
  if (n < kSteps - 1) return;
  atomicAdd(&g_step_cycles[0], 1ull);
  for (int i = 1; i < kSteps; ++i) atomicAdd(&g_step_cycles[i], static_cast<unsigned long long>(at[i] - at[i - 1]));
}
}  // namespace spar::probe
#define SPAR_PERMUTE_STEP(n) ::spar::probe::Step(n)

#include "kernels/cuda/gemm/moe_kernels.cu"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"

namespace spar::gemm::internal {
namespace {

// The routing blocks and their arrival, without the permutation.
__global__ void __launch_bounds__(kRouteThreads) RouteArrive(const MoeRouteParams r, int32_t* done) {
  __shared__ RouteSmem route_smem;
  __shared__ int is_last;
  RouteTokenBlock(r, blockIdx.x, route_smem);
  if (!cuda::ArriveIsLast(done, static_cast<int32_t>(gridDim.x), is_last)) return;
  if (threadIdx.x == 0) *done = 0;
}

// The permutation block alone, on ids already in memory (general instance).
__global__ void __launch_bounds__(kRouteThreads) PermuteOnly(const MoePermuteParams q) {
  extern __shared__ int s_mem[];
  __shared__ int scan_scratch[kPermuteScanScratch];
  const int n_local = q.expert_end - q.expert_begin;
  ClearPermuteCounts<kRouteThreads>(q, s_mem);
  __syncthreads();
  PermuteBlock<kRouteThreads>(q, s_mem, s_mem + n_local, scan_scratch);
}

double Time(const std::function<cudaError_t()>& launch, cudaStream_t st) {
  return bench::GraphMedianMicros([&](int) { bench::CheckCuda(launch(), "launch"); }, st, /*per_graph=*/50,
                                  /*reps=*/20);
}

}  // namespace
}  // namespace spar::gemm::internal

int main() {
  using namespace spar;
  using namespace spar::gemm::internal;
  using bench::CheckCuda;
  using bench::DeviceAlloc;
  const int E = 256, K = 8, kMaxTokens = 128;
  float* logits = DeviceAlloc<float>(kMaxTokens * E);
  float* bias = DeviceAlloc<float>(E);
  float* weights = DeviceAlloc<float>(kMaxTokens * K);
  int32_t* ids = DeviceAlloc<int32_t>(kMaxTokens * K);
  int32_t* offsets = DeviceAlloc<int32_t>(E + 1);
  int32_t* sorted = DeviceAlloc<int32_t>(kMaxTokens * K);
  int32_t* slot = DeviceAlloc<int32_t>(kMaxTokens * K);
  int32_t* done = DeviceAlloc<int32_t>(1);
  void* lists[2] = {DeviceAlloc<uint8_t>(1 << 20), DeviceAlloc<uint8_t>(1 << 20)};
  CheckCuda(cudaMemset(done, 0, 4), "memset");
  // Random logits in [-3, 3) and a small correction bias (a large one would
  // route every token to the same few experts).
  std::vector<float> h(kMaxTokens * E), hb(E);
  uint32_t s = 12345;
  auto next = [&](float scale) {
    s = s * 1664525u + 1013904223u;
    return ((s >> 8) / 16777216.0f - 0.5f) * scale;
  };
  for (auto& v : h) v = next(6.0f);
  for (auto& v : hb) v = next(0.002f);
  CheckCuda(cudaMemcpy(logits, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "logits");
  CheckCuda(cudaMemcpy(bias, hb.data(), E * 4, cudaMemcpyHostToDevice), "bias");
  cudaStream_t st;
  CheckCuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  int clock_khz = 0;
  CheckCuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock rate");
  std::vector<std::string> steps;
  std::printf("| tokens | route+permute (full) | route + arrival | route only (MoeRouteKernel) | "
              "permute block alone (1 block) |\n|---|---|---|---|---|\n");
  for (int T : {1, 8, 64}) {
    MoeRouteParams r;
    r.tokens = T;
    r.num_experts = E;
    r.top_k = K;
    r.routed_scaling = 2.5f;
    r.logits = logits;
    r.ld_logits = E;
    r.bias = bias;
    r.expert_ids = ids;
    r.expert_weights = weights;
    MoePermuteParams q;
    q.tokens = T;
    q.top_k = K;
    q.expert_ids = ids;
    q.expert_end = E;
    q.expert_offsets = offsets;
    q.sorted_token = sorted;
    q.slot = slot;
    q.num_work_lists = 2;
    q.work_block_tokens[0] = 8;
    q.work_block_tokens[1] = 16;
    q.work[0] = lists[0];
    q.work[1] = lists[1];
    const unsigned long long zero[probe::kSteps] = {};
    CheckCuda(cudaMemcpyToSymbol(probe::g_step_cycles, zero, sizeof(zero)), "reset steps");
    const double full = Time([&] { return LaunchMoeRoutePermuteKernel(r, q, done, st); }, st);
    unsigned long long cyc[probe::kSteps];
    CheckCuda(cudaMemcpyFromSymbol(cyc, probe::g_step_cycles, sizeof(cyc)), "read steps");
    if (cyc[0] > 0) {
      std::string line = "| " + std::to_string(T) + " | " + std::to_string(cyc[0]);
      double sum = 0.0;
      for (int i = 1; i < probe::kSteps; ++i) {
        const double c = static_cast<double>(cyc[i]) / cyc[0];
        sum += c;
        line += " | " + std::to_string(static_cast<long long>(c + 0.5));
      }
      char tail[32];
      std::snprintf(tail, sizeof(tail), " | %.2f |", sum / clock_khz * 1e3);
      line += tail;
      steps.push_back(line);
    }
    const double route_arrive = Time(
        [&] {
          RouteArrive<<<T, kRouteThreads, 0, st>>>(r, done);
          return cudaGetLastError();
        },
        st);
    const double route = Time([&] { return LaunchMoeRouteKernel(r, st); }, st);
    const double permute = Time(
        [&] {
          PermuteOnly<<<1, kRouteThreads, 2 * E * sizeof(int), st>>>(q);
          return cudaGetLastError();
        },
        st);
    std::printf("| %d%s | %.2f | %.2f | %.2f | %.2f |\n", T, T == 1 ? " (one-token path)" : "", full, route_arrive,
                route, permute);
  }
  std::printf("\nThe whole launch's permutation block, mean cycles of its thread 0 between steps (clock %d MHz):\n"
              "| tokens | launches | ids read + counted | counts and tiles a thread | block scan | first rows + barrier | "
              "global writes | sum us |\n|---|---|---|---|---|---|---|---|\n", clock_khz / 1000);
  for (const auto& l : steps) std::printf("%s\n", l.c_str());
  int d = -1;
  CheckCuda(cudaMemcpy(&d, done, 4, cudaMemcpyDeviceToHost), "counter");
  std::printf("counter left %d\n", d);
  return 0;
}
