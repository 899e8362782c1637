// 100K-token contexts on the cuda backend (GPU test: SKIPPED without an
// sm80+ GPU), on make-tiny models of one layer and 131072+ positions.
//
//  * Against the cpu backend at positions past 100K: a full 100K-token
//    prefill is ~2e13 multiply-adds for the cpu's lightning indexer (32
//    heads), hours on a CPU, so the context is built cheaply: 256 distinct
//    blocks are filled by short sequences (rows written at positions 0-63),
//    and a sequence whose block table names them over and over (1562 blocks:
//    99,968 positions) then prefills a 64-token chunk and decodes 8 tokens at
//    positions 99,968-100,039 on both engines, in exact mode (bf16 keys and
//    latent rows both sides). Every new token's indexer scores ~100K keys,
//    its top-k runs over 100K entries, its table holds 1563+ blocks (the
//    decode graphs' widest bucket), RoPE runs at positions > 2^16. The
//    keys repeat (each physical row ~6 times), so tied copies give the same
//    slot ids: selections compare as slot sets regardless of tie order.
//  * cuda alone at 135,168 tokens: the last prefill chunk's indexer logits
//    (4096 rows x 135,168 keys in fp32) span more than 2^31 bytes, so an
//    int32 byte offset anywhere in that path corrupts the last rows; the
//    chunked prefill's last row must equal a decode step at that position.
#include <algorithm>
#include <cmath>
#include <set>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

std::string OneLayerModel(int64_t max_positions, const std::string& name) {
  MakeTinyOptions o;
  o.seed = 17;
  o.layers = 1;
  o.max_position_embeddings = max_positions;
  o.out_dir = testing::TempDir(name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

std::unique_ptr<Engine> MakeEngine(const std::string& dir, const std::string& backend, CacheDtypes dtypes,
                                   int64_t num_blocks) {
  EngineOptions eo;
  eo.backend = backend;
  eo.model.num_blocks = num_blocks;
  eo.cache_dtypes = dtypes;
  auto e = Engine::Create(dir, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Runs a plan on `model`, returning the logits rows on the host.
std::vector<float> RunPlan(Model& model, StepPlan plan, ForwardTrace* trace = nullptr) {
  const ModelConfig& c = model.config();
  absl::Status s = plan.Finalize(c.vocab_size, c.max_position_embeddings, model.num_blocks());
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  auto out = model.Forward(plan, nullptr, trace);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->empty()) return {};
  auto host = model.backend()->ToHost(*out);
  EXPECT_TRUE(host.ok()) << host.status();
  return host.ok() ? *host : std::vector<float>();
}

// Of b's selected slots (all tokens, layer 0), the share a selected too.
double SlotOverlap(const ForwardTrace& a, const ForwardTrace& b, size_t tokens) {
  const auto& sa = a.topk_slots.at(0);
  const auto& sb = b.topk_slots.at(0);
  int64_t same = 0, total = 0;
  for (size_t t = 0; t < tokens; ++t) {
    const std::set<int32_t> set_a(sa.begin() + t * a.topk, sa.begin() + (t + 1) * a.topk);
    for (int j = 0; j < b.topk; ++j) {
      if (sb[t * b.topk + j] < 0) continue;
      ++total;
      same += set_a.count(sb[t * b.topk + j]);
    }
  }
  return total == 0 ? 1.0 : double(same) / total;
}

// The token whose logit is highest, and whether `chosen` is within 3e-2 of
// the row's scale from it.
int32_t Argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}
bool NearArgmax(const std::vector<float>& row, int32_t chosen) {
  double scale = 0;
  for (float v : row) scale = std::max(scale, std::fabs(double(v)));
  return row[chosen] >= row[Argmax(row)] - 3e-2 * scale;
}

TEST(LongContextGpuTest, CudaMatchesCpuPast100KPositions) {
  SPAR_REQUIRE_GPU();
  constexpr int kPhysical = 256, kLogical = 1562, kChunk = 64, kDecode = 8;
  const std::string dir = OneLayerModel(131072, "long_ctx_cpu_parity");
  const CacheDtypes exact{LatentFormat::kBF16, IndexerFormat::kBF16};
  auto cpu = MakeEngine(dir, "cpu", exact, kPhysical + 2);
  auto cuda = MakeEngine(dir, "cuda", exact, kPhysical + 2);
  ASSERT_TRUE(cpu && cuda);
  const absl::Time start = absl::Now();
  // 256 distinct blocks, 64 short sequences per step.
  for (int g = 0; g < kPhysical / 64; ++g) {
    StepPlan fill;
    for (int j = 0; j < 64; ++j) {
      const int b = g * 64 + j;
      fill.seqs.push_back(
          {.seq_id = b, .tokens = testing::RandomTokens(64, 1000 + b), .block_table = {b}, .num_logits = 0});
    }
    RunPlan(cpu->model(), fill);
    RunPlan(cuda->model(), fill);
  }
  std::vector<int32_t> table(kLogical);
  for (int i = 0; i < kLogical; ++i) table[i] = i % kPhysical;
  table.push_back(kPhysical);      // the chunk's own block
  table.push_back(kPhysical + 1);  // the decoded tokens'
  const int32_t start_pos = kLogical * 64;  // 99,968
  StepPlan chunk;
  chunk.seqs.push_back({.seq_id = 10000, .start_pos = start_pos, .tokens = testing::RandomTokens(kChunk, 7),
                        .block_table = table, .num_logits = 1});
  ForwardTrace ta, tb;
  const std::vector<float> a = RunPlan(cpu->model(), chunk, &ta);
  const std::vector<float> b = RunPlan(cuda->model(), chunk, &tb);
  ASSERT_FALSE(a.empty() || b.empty());
  const double overlap = SlotOverlap(ta, tb, kChunk);
  std::cout << "positions " << start_pos << "-" << start_pos + kChunk - 1 << " over " << kLogical + 1
            << " blocks: layer 0 top-k overlap cuda vs cpu " << overlap << ", last-row logit rel err "
            << testing::RelErr(a, b) << " (cpu side " << absl::Now() - start << " with the fill)\n";
  EXPECT_GE(overlap, 0.95);
  EXPECT_TRUE(NearArgmax(a, Argmax(b))) << "cuda's first token is not a near-argmax of the cpu's logits";
  int exact_picks = Argmax(a) == Argmax(b);
  int near_picks = NearArgmax(a, Argmax(b));
  // Decode, teacher-forced by the cpu's greedy tokens (cuda replays graphs).
  int32_t next = Argmax(a);
  for (int step = 0; step < kDecode; ++step) {
    const int32_t pos = start_pos + kChunk + step;
    StepPlan decode;
    decode.seqs.push_back({.seq_id = 10000, .start_pos = pos, .tokens = {next},
                           .block_table = std::vector<int32_t>(table.begin(), table.begin() + pos / 64 + 1),
                           .num_logits = 1});
    const std::vector<float> da = RunPlan(cpu->model(), decode);
    const std::vector<float> db = RunPlan(cuda->model(), decode);
    ASSERT_FALSE(da.empty() || db.empty());
    exact_picks += Argmax(da) == Argmax(db);
    near_picks += NearArgmax(da, Argmax(db));
    EXPECT_LE(testing::RelErr(da, db), 0.1) << "decode at position " << pos;
    next = Argmax(da);
  }
  std::cout << "first tokens: " << exact_picks << "/" << kDecode + 1 << " greedy picks equal the cpu's, "
            << near_picks << " near its argmax\n";
  EXPECT_GE(near_picks, kDecode);  // of kDecode + 1
  EXPECT_GE(exact_picks, (kDecode + 1) * 3 / 4);
}

TEST(LongContextGpuTest, PrefillPast2To31IndexerLogitBytesEqualsDecode) {
  SPAR_REQUIRE_GPU();
  constexpr int kChunk = 4096, kChunks = 33;  // 135,168 tokens; the last chunk scores 135,168 keys per row
  constexpr int kLen = kChunk * kChunks;
  const std::string dir = OneLayerModel(kLen + kChunk, "long_ctx_2g");
  constexpr int kSeqBlocks = kLen / 64 + 1;
  auto cuda = MakeEngine(dir, "cuda", {}, 2 * kSeqBlocks);
  ASSERT_TRUE(cuda);
  Model& model = cuda->model();
  const std::vector<int32_t> prompt = testing::RandomTokens(kLen, 99);
  auto table_of = [&](int seq) {
    std::vector<int32_t> t(kSeqBlocks);
    for (int i = 0; i < kSeqBlocks; ++i) t[i] = seq * kSeqBlocks + i;
    return t;
  };
  // Sequence 0: the whole prompt in chunks; the last row's logits and the
  // last chunk's selections.
  std::vector<float> prefill;
  ForwardTrace prefill_trace;
  for (int c = 0; c < kChunks; ++c) {
    StepPlan p;
    const bool last = c + 1 == kChunks;
    p.seqs.push_back({.seq_id = 0, .start_pos = c * kChunk,
                      .tokens = std::vector<int32_t>(prompt.begin() + c * kChunk, prompt.begin() + (c + 1) * kChunk),
                      .block_table = table_of(0), .num_logits = last ? 1 : 0});
    std::vector<float> out = RunPlan(model, p, last ? &prefill_trace : nullptr);
    if (last) prefill = out;
  }
  // Sequence 1: all but the last token, then the last token as a decode step.
  for (int c = 0; c < kChunks; ++c) {
    const int begin = c * kChunk, end = std::min(kLen - 1, (c + 1) * kChunk);
    StepPlan p;
    p.seqs.push_back({.seq_id = 1, .start_pos = begin,
                      .tokens = std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end),
                      .block_table = table_of(1), .num_logits = 0});
    RunPlan(model, p);
  }
  StepPlan decode;
  decode.seqs.push_back({.seq_id = 1, .start_pos = kLen - 1, .tokens = {prompt.back()}, .block_table = table_of(1),
                         .num_logits = 1});
  ForwardTrace decode_trace;
  const std::vector<float> decoded = RunPlan(model, decode, &decode_trace);
  ASSERT_FALSE(prefill.empty() || decoded.empty());
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  // The same position's selection in both, as positions (the tables differ).
  const int topk = prefill_trace.topk;
  const auto& ps = prefill_trace.topk_slots.at(0);
  const auto& ds = decode_trace.topk_slots.at(0);
  std::set<int32_t> from_prefill, from_decode;
  auto position = [&](int seq, int32_t slot) {
    return static_cast<int32_t>((slot / 64 - seq * kSeqBlocks) * 64 + slot % 64);
  };
  for (int j = 0; j < topk; ++j) {
    if (ps[(kChunk - 1) * topk + j] >= 0) from_prefill.insert(position(0, ps[(kChunk - 1) * topk + j]));
    if (ds[j] >= 0) from_decode.insert(position(1, ds[j]));
  }
  int same = 0;
  for (int32_t p : from_decode) same += from_prefill.count(p);
  const double err = testing::RelErr(decoded, prefill);
  std::cout << kLen << "-token prefill (last chunk: " << kChunk << " x " << kLen << " fp32 logits = "
            << double(kChunk) * kLen * 4 / (1 << 30) << " GiB): last row vs a decode step at position " << kLen - 1
            << ": logit rel err " << err << ", " << same << "/" << from_decode.size() << " selected positions equal\n";
  EXPECT_LE(err, 2e-2);
  EXPECT_EQ(Argmax(prefill), Argmax(decoded));
  EXPECT_GE(same, static_cast<int>(from_decode.size()) * 9 / 10);
}

}  // namespace
}  // namespace spar
