// Where the multi-token route + permute launch spends its time (CUDA-graph
// replays, us per launch; 256 experts, top-8, two work lists): the whole
// launch, the routing blocks with their arrival but no permutation, the
// routing alone (MoeRouteKernel), and the permutation block alone on ids
// already in memory. It includes moe_kernels.cu itself to reach the
// kernels' internal pieces (RouteTokenBlock, PermuteBlock), so it measures
// whatever tree it is compiled in; to compare two, put the other
// moe_kernels.cu under DIR/kernels/cuda/gemm/ and add -IDIR first. Not part
// of the build; on this machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_80,code=sm_90 --expt-relaxed-constexpr \
//     -I. -Ibuild-cuda -o /tmp/route_probe tools/device/probes/route_probe.cu
#include "kernels/cuda/gemm/moe_kernels.cu"
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace spar;
using namespace spar::gemm::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void __launch_bounds__(kRouteThreads) RouteArrive(const MoeRouteParams r, int32_t* done) {
  __shared__ RouteSmem route_smem;
  __shared__ int is_last;
  RouteTokenBlock(r, blockIdx.x, route_smem);
  if (!spar::cuda::ArriveIsLast(done, static_cast<int32_t>(gridDim.x), is_last)) return;
  if (threadIdx.x == 0) *done = 0;
}
__global__ void __launch_bounds__(kRouteThreads) PermuteOnly(const MoePermuteParams q) {
  extern __shared__ int s_mem[];
  __shared__ int scan_scratch[kPermuteScanScratch];
  const int n_local = q.expert_end - q.expert_begin;
  PermuteBlock<kRouteThreads>(q, s_mem, s_mem + n_local, scan_scratch);
}

template <class F>
float TimeGraph(F&& launch, cudaStream_t st) {
  cudaGraph_t g; cudaGraphExec_t ge;
  const int per = 50;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < per; ++i) launch();
  cudaStreamEndCapture(st, &g);
  if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) { printf("instantiate failed\n"); return -1; }
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
  const int E = 256, K = 8, maxT = 128;
  float *logits, *bias, *weights; int32_t *ids, *offsets, *sorted, *slot, *done; void *w0, *w1;
  CK(cudaMalloc(&logits, maxT * E * 4)); CK(cudaMalloc(&bias, E * 4)); CK(cudaMalloc(&weights, maxT * K * 4));
  CK(cudaMalloc(&ids, maxT * K * 4)); CK(cudaMalloc(&offsets, (E + 1) * 4)); CK(cudaMalloc(&sorted, maxT * K * 4));
  CK(cudaMalloc(&slot, maxT * K * 4)); CK(cudaMalloc(&done, 4)); CK(cudaMemset(done, 0, 4));
  CK(cudaMalloc(&w0, 1 << 20)); CK(cudaMalloc(&w1, 1 << 20));
  std::vector<float> h(maxT * E), hb(E);
  uint32_t s = 12345;
  for (auto& v : h) { s = s * 1664525u + 1013904223u; v = ((s >> 8) / 16777216.0f - 0.5f) * 6.0f; }
  for (auto& v : hb) { s = s * 1664525u + 1013904223u; v = ((s >> 8) / 16777216.0f - 0.5f) * 0.002f; }
  CK(cudaMemcpy(logits, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, hb.data(), E * 4, cudaMemcpyHostToDevice));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("| tokens | route+permute (full) | route + arrival | route only (MoeRouteKernel) | permute block alone (1 block) | one-token path |\n|---|---|---|---|---|---|\n");
  for (int T : {1, 8, 64}) {
    MoeRouteParams r; r.tokens = T; r.num_experts = E; r.top_k = K; r.routed_scaling = 2.5f; r.logits = logits;
    r.ld_logits = E; r.bias = bias; r.expert_ids = ids; r.expert_weights = weights;
    MoePermuteParams q; q.tokens = T; q.top_k = K; q.expert_ids = ids; q.expert_begin = 0; q.expert_end = E;
    q.expert_offsets = offsets; q.sorted_token = sorted; q.slot = slot; q.num_work_lists = 2;
    q.work_block_tokens[0] = 8; q.work_block_tokens[1] = 16; q.work[0] = w0; q.work[1] = w1;
    const float full = TimeGraph([&] { LaunchMoeRoutePermuteKernel(r, q, done, st); }, st);
    const float ra = TimeGraph([&] { RouteArrive<<<T, kRouteThreads, 0, st>>>(r, done); }, st);
    const float ro = TimeGraph([&] { LaunchMoeRouteKernel(r, st); }, st);
    const float po = TimeGraph([&] { PermuteOnly<<<1, kRouteThreads, 2 * E * 4, st>>>(q); }, st);
    printf("| %d | %.2f | %.2f | %.2f | %.2f | %s |\n", T, full, ra, ro, po, T == 1 ? "(full = one-token path)" : "");
  }
  CK(cudaDeviceSynchronize());
  int d; CK(cudaMemcpy(&d, done, 4, cudaMemcpyDeviceToHost)); printf("counter left %d\n", d);
  return 0;
}
