// The router's GEMV joined to the routing and permutation launch (one
// token): its logits against a double-precision dot product of the same
// bf16 inputs, and its ids, weights, offsets, slots and work lists equal to
// LaunchMoeRoutePermute's on those very logits, eagerly and replayed from a
// CUDA graph; then the shapes it refuses.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/ref/moe_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

std::vector<uint16_t> RandomBf16Bits(size_t n, Rng& rng, float scale) {
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = FloatToBf16(scale * rng.Symmetric());
  return v;
}

// Everything the launch writes, downloaded.
struct Outputs {
  std::vector<int32_t> ids, offsets, sorted, slot, lists;
  std::vector<float> weights;
};

struct Buffers {
  DeviceArray<int32_t> ids, offsets, sorted, slot, lists;
  DeviceArray<float> weights;
  size_t list_bytes = 0;

  Buffers(int top_k, int n_local) : ids(top_k), offsets(n_local + 1), sorted(top_k), slot(top_k), weights(top_k) {
    list_bytes = MoeGroupedGemmWorkspaceBytes(top_k, n_local);
    lists.Resize(2 * list_bytes / 4);
  }
  void Poison() {
    ids.Poison();
    offsets.Poison();
    sorted.Poison();
    slot.Poison();
    lists.Poison();
    weights.Poison();
  }
  // sorted_token holds the rows this rank computes (offsets[n_local] of them).
  Outputs Download(int n_local) const {
    Outputs o{ids.Download(), offsets.Download(), sorted.Download(), slot.Download(), lists.Download(),
              weights.Download()};
    o.sorted.resize(std::max(0, o.offsets[n_local]));
    return o;
  }
};

void ExpectSameOutputs(const Outputs& got, const Outputs& want, size_t list_bytes) {
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.weights, want.weights);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.sorted, want.sorted);
  EXPECT_EQ(got.slot, want.slot);
  for (int l = 0; l < 2; ++l) {  // the entry count, then 4 words an entry
    const size_t base = l * list_bytes / 4;
    ASSERT_EQ(got.lists[base], want.lists[base]) << "work list " << l;
    for (int32_t i = 0; i < 4 * want.lists[base]; ++i) {
      ASSERT_EQ(got.lists[base + 4 + i], want.lists[base + 4 + i]) << "work list " << l << " word " << i;
    }
  }
}

TEST(Sm80_MoeRouterRoutePermute, LogitsMatchTheDotProductsAndRoutingMatchesTheTwoStepPath) {
  SPAR_REQUIRE_GPU();
  struct Case {
    int64_t hidden, ld;
    ref::MoeRoutingParams rp;
    int e0, e1;
  };
  const Case cases[] = {
      {6144, 6144, {256, 8, 1, 1, true, 2.5f}, 0, 256},    // GLM-5
      {7168, 7176, {256, 8, 8, 4, true, 2.5f}, 64, 128},   // DeepSeek-V3.2 groups, padded rows, a rank of EP 4
      {8200, 8200, {512, 32, 16, 8, true, 2.5f}, 0, 512},  // the most experts; a second, partial batch of loads
      {64, 64, {16, 4, 4, 2, true, 2.5f}, 0, 16},          // the tiny models
      {8, 8, {7, 3, 1, 1, false, 1.0f}, 0, 7},             // one vector per row, an odd expert count
  };
  Rng rng(41);
  DeviceArray<int32_t> done(1);
  SPAR_ASSERT_CUDA(cudaMemset(done.get(), 0, 4));
  for (const Case& c : cases) {
    const int experts = c.rp.num_experts, top_k = c.rp.top_k, n_local = c.e1 - c.e0;
    SCOPED_TRACE(absl::StrCat("hidden=", c.hidden, " E=", experts, " groups=", c.rp.n_group, " local=[", c.e0, ",",
                              c.e1, ")"));
    const std::vector<uint16_t> x = RandomBf16Bits(c.hidden, rng, 2.0f);
    const std::vector<uint16_t> w = RandomBf16Bits(experts * c.ld, rng, 0.05f);
    std::vector<float> bias(experts);
    for (auto& b : bias) b = 0.1f * rng.Symmetric();
    DeviceArray<uint16_t> dx, dw;
    dx.Upload(x);
    dw.Upload(w);
    DeviceArray<float> db, logits(experts);
    db.Upload(bias);
    Buffers out(top_k, n_local);

    MoeRouterParams g;
    g.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
    g.weight = reinterpret_cast<const __nv_bfloat16*>(dw.get());
    g.ld = c.ld;
    g.hidden = c.hidden;
    g.logits = logits.get();
    MoeRouteParams r;
    r.tokens = 1;
    r.num_experts = experts;
    r.top_k = top_k;
    r.n_group = c.rp.n_group;
    r.topk_group = c.rp.topk_group;
    r.renormalize = c.rp.renormalize;
    r.routed_scaling = c.rp.routed_scaling;
    r.logits = logits.get();
    r.ld_logits = experts;
    r.bias = db.get();
    r.expert_ids = out.ids.get();
    r.expert_weights = out.weights.get();
    MoePermuteParams q;
    q.tokens = 1;
    q.top_k = top_k;
    q.expert_ids = out.ids.get();
    q.expert_begin = c.e0;
    q.expert_end = c.e1;
    q.expert_offsets = out.offsets.get();
    q.sorted_token = out.sorted.get();
    q.slot = out.slot.get();
    q.num_work_lists = 2;  // 8- and 64-row tiles, as the engine asks for them
    q.work_block_tokens[0] = 8;
    q.work_block_tokens[1] = 64;
    q.work[0] = out.lists.get();
    q.work[1] = out.lists.get() + out.list_bytes / 4;
    ASSERT_TRUE(MoeRouterRoutePermuteSupported(g, r));

    logits.Poison();
    out.Poison();
    const absl::Status st = LaunchMoeRouterRoutePermute(g, r, q, done.get(), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_EQ(done.Download()[0], 0) << "the arrival counter was not reset";
    const std::vector<float> got_logits = logits.Download();
    // Products of bf16 values are exact in fp32; ~22 rounded additions
    // deep, the sum is within ~2^-19 of the sum of |products|, while one
    // lost 16-byte vector (8 terms) would be ~2^-10 of it.
    for (int e = 0; e < experts; ++e) {
      double dot = 0.0, mag = 0.0;
      for (int64_t i = 0; i < c.hidden; ++i) {
        const double p = static_cast<double>(Bf16ToFloat(w[e * c.ld + i])) * Bf16ToFloat(x[i]);
        dot += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got_logits[e], dot, mag * 0x1p-18 + 1e-30) << "expert " << e;
    }
    const Outputs fused = out.Download(n_local);

    // The two-step path on the fused launch's own logits: the same outputs.
    out.Poison();
    ASSERT_TRUE(LaunchMoeRoutePermute(r, q, done.get(), nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    ExpectSameOutputs(fused, out.Download(n_local), out.list_bytes);
    // And the reference routing of those logits.
    std::vector<int32_t> ref_ids(top_k);
    std::vector<float> ref_w(top_k);
    ref::MoeRoute(got_logits.data(), bias.data(), 1, c.rp, ref_ids.data(), ref_w.data());
    EXPECT_EQ(fused.ids, ref_ids);

    // Replayed from a CUDA graph, twice: the same outputs, the counter back at 0.
    cudaStream_t s;
    SPAR_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    SPAR_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const absl::Status cap = LaunchMoeRouterRoutePermute(g, r, q, done.get(), s);
    SPAR_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
    ASSERT_TRUE(cap.ok()) << cap;
    cudaGraphExec_t exec;
    SPAR_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    logits.Poison();
    out.Poison();
    SPAR_ASSERT_CUDA(cudaGraphLaunch(exec, s));
    SPAR_ASSERT_CUDA(cudaGraphLaunch(exec, s));
    SPAR_ASSERT_CUDA(cudaStreamSynchronize(s));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    ASSERT_EQ(done.Download()[0], 0);
    EXPECT_EQ(logits.Download(), got_logits);
    ExpectSameOutputs(out.Download(n_local), fused, out.list_bytes);
  }
}

// Shapes the fused launch does not take are refused by name before anything
// is launched (host pointers stand in for device buffers: validation never
// reads them), so this runs without a GPU too.
TEST(MoeParams, RouterRoutePermuteRefusesWhatItCannotRun) {
  alignas(256) static int32_t ints[64];
  alignas(256) static float floats[64];
  alignas(256) static uint16_t bf16[128];
  MoeRouterParams g;
  g.x = reinterpret_cast<const __nv_bfloat16*>(bf16);
  g.weight = reinterpret_cast<const __nv_bfloat16*>(bf16);
  g.hidden = 8;
  g.logits = floats;
  MoeRouteParams r;
  r.tokens = 1;
  r.num_experts = 16;
  r.top_k = 4;
  r.logits = floats;
  r.ld_logits = 16;
  r.bias = floats;
  r.expert_ids = ints;
  r.expert_weights = floats;
  MoePermuteParams q;
  q.tokens = 1;
  q.top_k = 4;
  q.expert_ids = ints;
  q.expert_end = 16;
  q.expert_offsets = ints;
  q.sorted_token = ints;
  q.slot = ints;
  ASSERT_TRUE(MoeRouterRoutePermuteSupported(g, r));
  auto refused = [&](const char* what) {
    const absl::Status st = LaunchMoeRouterRoutePermute(g, r, q, ints, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find("MoeRouterRoutePermute: router"), std::string::npos) << what << ": " << st;
    EXPECT_FALSE(MoeRouterRoutePermuteSupported(g, r)) << what;
  };
  r.tokens = q.tokens = 2;
  refused("two tokens");
  r.tokens = q.tokens = 1;
  g.hidden = 12;
  refused("hidden not a multiple of 8");
  g.hidden = 8;
  g.ld = 4;
  refused("ld below hidden");
  g.ld = 0;
  g.x = reinterpret_cast<const __nv_bfloat16*>(bf16 + 1);
  refused("misaligned x");
  g.x = reinterpret_cast<const __nv_bfloat16*>(bf16);
  r.logits = floats + 16;
  refused("routing other logits");
  r.logits = floats;
  const absl::Status st = LaunchMoeRouterRoutePermute(g, r, q, nullptr, nullptr);
  EXPECT_NE(st.message().find("done_counter"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
