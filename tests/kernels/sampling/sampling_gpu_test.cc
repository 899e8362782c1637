// The GPU sampler picks exactly ref::SampleToken's token on random logits
// with many seeds and parameter mixes (greedy, temperature, top-k, top-p,
// min-p, penalties, token masks of constrained decoding), peaked, flat and
// tied distributions, and reports the reference's logprobs. A mismatch could only come from a cumulative sum
// landing within ~1e-13 of a boundary, which random inputs do not hit.
#include "kernels/cuda/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/sampling_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

enum class Dist { kPeaked, kFlat, kTied, kMasked };

std::vector<float> MakeLogits(int vocab, Dist d, Rng& rng) {
  std::vector<float> l(vocab);
  for (auto& v : l) {
    float g = 0;
    for (int k = 0; k < 12; ++k) g += rng.Uniform();
    g -= 6.0f;  // ~N(0, 1)
    switch (d) {
      case Dist::kPeaked: v = 4.0f * g; break;
      case Dist::kFlat: v = rng.Symmetric(); break;
      case Dist::kTied: v = std::round(6.0f * g) * 0.5f; break;
      case Dist::kMasked: v = rng.Below(3) == 0 ? -INFINITY : 3.0f * g; break;
    }
  }
  return l;
}

struct Row {
  std::vector<float> logits;
  SamplingParams p;
  TokenHistory h;
  uint64_t step = 0;
  std::vector<uint32_t> mask;  // empty: none; else ceil(vocab / 32) words
};

Row RandomRow(int vocab, Rng& rng, bool flat_heavy) {
  Row r;
  const Dist dists[] = {Dist::kPeaked, Dist::kFlat, Dist::kTied, Dist::kMasked};
  r.logits = MakeLogits(vocab, flat_heavy ? Dist::kFlat : dists[rng.Below(4)], rng);
  const float temps[] = {0.0f, 0.6f, 1.0f, 1.5f};
  const int top_ks[] = {0, 0, 1, 5, 50, 5000};
  const float top_ps[] = {1.0f, 1.0f, 0.95f, 0.8f, 0.3f, 0.999f};
  const float min_ps[] = {0.0f, 0.0f, 0.02f, 0.2f};
  r.p.temperature = temps[rng.Below(4)];
  r.p.top_k = top_ks[rng.Below(6)];
  r.p.top_p = top_ps[rng.Below(6)];
  r.p.min_p = min_ps[rng.Below(4)];
  if (rng.Below(2)) {
    r.p.repetition_penalty = rng.Below(2) ? 1.2f : 1.0f;
    r.p.frequency_penalty = rng.Below(2) ? 0.3f : 0.0f;
    r.p.presence_penalty = rng.Below(2) ? 0.5f : 0.0f;
    for (int k = 0; k < 60; ++k) r.h.prompt_counts[static_cast<int32_t>(rng.Below(vocab))] += 1;
    for (int k = 0; k < 25; ++k) r.h.output_counts[static_cast<int32_t>(rng.Below(vocab))] += 1 + static_cast<int>(rng.Below(3));
    r.h.output_counts[r.h.prompt_counts.begin()->first] += 1;  // seen in both
  }
  r.p.seed = rng.NextU64();
  r.step = rng.Below(10000);
  return r;
}

std::string Describe(const Row& r) {
  return ::testing::PrintToString(r.p.temperature) + " k " + ::testing::PrintToString(r.p.top_k) + " p " +
         ::testing::PrintToString(r.p.top_p) + " minp " + ::testing::PrintToString(r.p.min_p) + " rep " +
         ::testing::PrintToString(r.p.repetition_penalty);
}

// A logprob equal to the reference's within 1e-5 relative; -inf (a masked
// id among the top alternatives) exactly.
void ExpectLogprob(float got, float want, int row) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << "row " << row;
  } else {
    EXPECT_NEAR(got, want, 1e-5f * (1.0f + std::fabs(want))) << "row " << row;
  }
}

// Runs one batch on the GPU and compares tokens and logprobs to the reference.
void RunBatch(const std::vector<Row>& rows, int vocab, int* mismatches) {
  const int n = static_cast<int>(rows.size());
  const int ntop = 5;
  // Masks with a stride past the row (as a caller's padded buffer may be);
  // rows without one allow every id.
  const int64_t words = (vocab + 31) / 32, stride = words + 3;
  bool any_mask = false;
  for (const Row& r : rows) any_mask = any_mask || !r.mask.empty();
  std::vector<uint32_t> masks(static_cast<size_t>(n) * stride, 0xffffffffu);
  for (int i = 0; i < n; ++i) {
    if (!rows[i].mask.empty()) std::copy(rows[i].mask.begin(), rows[i].mask.end(), masks.begin() + i * stride);
  }
  DeviceArray<uint32_t> dmask;
  if (any_mask) dmask.Upload(masks);
  std::vector<float> logits(static_cast<size_t>(n) * vocab);
  std::vector<SamplingRowParams> params(n);
  std::vector<int32_t> offsets(1, 0), ids, pc, oc;
  for (int i = 0; i < n; ++i) {
    std::copy(rows[i].logits.begin(), rows[i].logits.end(), logits.begin() + static_cast<size_t>(i) * vocab);
    const SamplingParams& p = rows[i].p;
    params[i] = SamplingRowParams{p, rows[i].step};
    std::vector<int32_t> u;
    for (const auto& [id, c] : rows[i].h.prompt_counts) u.push_back(id);
    for (const auto& [id, c] : rows[i].h.output_counts) u.push_back(id);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (int32_t id : u) {
      ids.push_back(id);
      auto pit = rows[i].h.prompt_counts.find(id);
      auto oit = rows[i].h.output_counts.find(id);
      pc.push_back(pit == rows[i].h.prompt_counts.end() ? 0 : pit->second);
      oc.push_back(oit == rows[i].h.output_counts.end() ? 0 : oit->second);
    }
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  ids.push_back(0);  // keep the arrays non-empty
  pc.push_back(0);
  oc.push_back(0);
  DeviceArray<float> dl, dlp(n), dtv(n * ntop);
  dl.Upload(logits);
  dlp.Poison();
  dtv.Poison();
  DeviceArray<SamplingRowParams> dp;
  dp.Upload(params);
  DeviceArray<int32_t> doff, dids, dpc, doc, dtok(n), dti(n * ntop);
  doff.Upload(offsets);
  dids.Upload(ids);
  dpc.Upload(pc);
  doc.Upload(oc);
  dtok.Poison();
  dti.Poison();
  DeviceArray<uint8_t> ws(SampleWorkspaceBytes(n, vocab));
  SampleParams sp;
  sp.logits = dl.get();
  sp.logits_stride = vocab;
  sp.rows = n;
  sp.vocab = vocab;
  sp.params = dp.get();
  sp.history_offsets = doff.get();
  sp.history_ids = dids.get();
  sp.history_prompt_counts = dpc.get();
  sp.history_output_counts = doc.get();
  if (any_mask) {
    sp.token_mask = dmask.get();
    sp.token_mask_stride = stride;
  }
  sp.workspace = ws.get();
  sp.workspace_bytes = ws.size();
  sp.tokens = dtok.get();
  sp.token_logprobs = dlp.get();
  sp.top_logprobs = ntop;
  sp.top_logprob_ids = dti.get();
  sp.top_logprob_values = dtv.get();
  const absl::Status st = LaunchSample(sp, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto tok = dtok.Download();
  const auto lp = dlp.Download();
  const auto ti = dti.Download();
  const auto tv = dtv.Download();
  for (int i = 0; i < n; ++i) {
    const Row& r = rows[i];
    const uint32_t* mask = r.mask.empty() ? nullptr : r.mask.data();
    const int32_t want = ref::SampleToken(r.logits.data(), vocab, r.p, r.h, r.step, mask);
    if (tok[i] != want) {
      if (*mismatches < 10) ADD_FAILURE() << "row " << i << " (" << Describe(r) << "): gpu " << tok[i] << " ref " << want;
      ++*mismatches;
      continue;
    }
    if (mask != nullptr && ref::MaskAllowsAFiniteLogit(r.logits.data(), vocab, mask)) {
      EXPECT_TRUE((mask[want >> 5] >> (want & 31)) & 1u) << "row " << i << ": token " << want << " is masked";
    }
    std::vector<float> masked = r.logits;  // logprobs are of the masked row
    ref::ApplyTokenMask(masked.data(), vocab, mask);
    const float want_lp = ref::TokenLogprob(masked.data(), vocab, want);
    ExpectLogprob(lp[i], want_lp, i);
    const auto top = ref::TopLogprobs(masked.data(), vocab, ntop);
    for (int k = 0; k < ntop; ++k) {
      EXPECT_EQ(ti[i * ntop + k], top[k].first) << "row " << i << " top " << k;
      ExpectLogprob(tv[i * ntop + k], top[k].second, i);
    }
  }
}

TEST(Sampling, MatchesReferenceManySeeds) {
  SPAR_REQUIRE_GPU();
  Rng rng(2026);
  int mismatches = 0, total = 0;
  for (int batch = 0; batch < 6; ++batch) {
    const int vocab = 32000;
    std::vector<Row> rows;
    for (int i = 0; i < 96; ++i) rows.push_back(RandomRow(vocab, rng, false));
    RunBatch(rows, vocab, &mismatches);
    total += static_cast<int>(rows.size());
  }
  EXPECT_EQ(mismatches, 0) << "of " << total << " rows";
}

// GLM-5's vocabulary, and flat distributions where the kept set is far
// larger than the candidate buffer (radix-descent path).
TEST(Sampling, FullVocabAndFlatRows) {
  SPAR_REQUIRE_GPU();
  Rng rng(7);
  int mismatches = 0;
  {
    std::vector<Row> rows;
    for (int i = 0; i < 12; ++i) rows.push_back(RandomRow(154880, rng, false));
    RunBatch(rows, 154880, &mismatches);
  }
  {
    std::vector<Row> rows;
    for (int i = 0; i < 48; ++i) {
      Row r = RandomRow(20000, rng, true);
      r.p.temperature = 1.0f;
      r.p.top_k = (i % 3 == 0) ? 12000 : 0;
      r.p.top_p = (i % 3 == 1) ? 1.0f : (i % 2 ? 0.999f : 0.7f);
      rows.push_back(std::move(r));
    }
    RunBatch(rows, 20000, &mismatches);
  }
  EXPECT_EQ(mismatches, 0);
}

// Greedy with ties: the lowest id among equal maxima; same seed and step
// give the same token.
TEST(Sampling, GreedyTiesAndDeterminism) {
  SPAR_REQUIRE_GPU();
  Rng rng(9);
  const int vocab = 5000;
  std::vector<Row> rows;
  for (int i = 0; i < 16; ++i) {
    Row r;
    r.logits.assign(vocab, 0.0f);
    for (auto& v : r.logits) v = static_cast<float>(rng.Below(4));  // many ties at 3
    r.p.temperature = i % 2 ? 0.0f : 1.0f;
    r.p.top_k = i % 2 ? 0 : 1;
    r.p.seed = i;
    rows.push_back(std::move(r));
  }
  int mismatches = 0;
  RunBatch(rows, vocab, &mismatches);
  RunBatch(rows, vocab, &mismatches);
  EXPECT_EQ(mismatches, 0);
}

// Token masks (constrained decoding): dense and sparse masks, masks that
// hide the most likely ids, a single allowed id, a mask allowing nothing
// (ignored), vocabularies that are not a multiple of 32 (the tiny models'
// 1,085) and GLM-5's, every parameter mix; rows with and without masks in
// one batch.
TEST(Sampling, TokenMasksMatchReference) {
  SPAR_REQUIRE_GPU();
  Rng rng(31);
  int mismatches = 0, total = 0;
  for (const int vocab : {1085, 32000, 154880}) {
    const int words = (vocab + 31) / 32;
    std::vector<Row> rows;
    for (int i = 0; i < (vocab > 100000 ? 12 : 64); ++i) {
      Row r = RandomRow(vocab, rng, false);
      const int kind = i % 6;
      if (kind != 5) r.mask.assign(words, 0u);
      auto allow = [&](int id) { r.mask[id >> 5] |= 1u << (id & 31); };
      if (kind == 0) {  // dense: ~70% allowed
        for (int id = 0; id < vocab; ++id) {
          if (rng.Below(10) < 7) allow(id);
        }
      } else if (kind == 1) {  // sparse: a few ids, as a grammar in a literal allows
        for (int k = 0; k < 1 + static_cast<int>(rng.Below(5)); ++k) allow(static_cast<int>(rng.Below(vocab)));
      } else if (kind == 2) {  // the 50 most likely ids hidden
        std::vector<int> order(vocab);
        for (int id = 0; id < vocab; ++id) order[id] = id;
        std::partial_sort(order.begin(), order.begin() + 50, order.end(),
                          [&](int a, int b) { return r.logits[a] > r.logits[b]; });
        for (int id = 0; id < vocab; ++id) allow(id);
        for (int k = 0; k < 50; ++k) r.mask[order[k] >> 5] &= ~(1u << (order[k] & 31));
      } else if (kind == 3) {  // exactly one id, the last of the vocabulary
        allow(vocab - 1);
      } else if (kind == 4) {  // nothing allowed: sampled unmasked; stray bits past the vocabulary ignored
        if (vocab % 32 != 0) r.mask[words - 1] = ~0u << (vocab % 32);
      }
      rows.push_back(std::move(r));
    }
    RunBatch(rows, vocab, &mismatches);
    total += static_cast<int>(rows.size());
  }
  EXPECT_EQ(mismatches, 0) << "of " << total << " rows";
}

TEST(Sampling, RejectsBadParams) {
  SampleParams p;
  p.rows = 1;
  p.vocab = 10;
  EXPECT_EQ(LaunchSample(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Sampling, RejectsAShortMaskStride) {
  SPAR_REQUIRE_GPU();
  DeviceArray<float> logits(64);
  DeviceArray<SamplingRowParams> params(1);
  DeviceArray<int32_t> tokens(1);
  DeviceArray<uint32_t> mask(1);
  DeviceArray<uint8_t> ws(SampleWorkspaceBytes(1, 64));
  SampleParams p;
  p.logits = logits.get();
  p.logits_stride = 64;
  p.rows = 1;
  p.vocab = 64;
  p.params = params.get();
  p.workspace = ws.get();
  p.workspace_bytes = ws.size();
  p.tokens = tokens.get();
  p.token_mask = mask.get();
  p.token_mask_stride = 1;  // 64 ids need 2 words
  const absl::Status st = LaunchSample(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("token_mask_stride"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
