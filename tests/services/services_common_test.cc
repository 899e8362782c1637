// services/common: flags from the environment, layer splits, the worker
// plane's wire conversions.
#include <cstdlib>

#include "gtest/gtest.h"
#include "services/common/args.h"
#include "services/common/grpc_status.h"
#include "services/common/layer_split.h"
#include "services/common/worker_convert.h"

namespace spar {
namespace {

TEST(ArgParserTest, EnvironmentThenCommandLine) {
  std::string model;
  int64_t blocks = 1, port = 2;
  ArgParser args("worker", "SPAR_");
  args.AddString("model", &model, "");
  args.AddInt("num-blocks", &blocks, "");
  args.AddInt("port", &port, "");
  EXPECT_EQ(args.EnvName("num-blocks"), "SPAR_NUM_BLOCKS");
  ::setenv("SPAR_NUM_BLOCKS", "77", 1);
  ::setenv("SPAR_MODEL", "/env/model", 1);
  const char* argv[] = {"spar-worker", "--model", "/flag/model"};
  ASSERT_TRUE(args.Parse(3, const_cast<char**>(argv), 1).ok());
  EXPECT_EQ(model, "/flag/model");  // the command line wins
  EXPECT_EQ(blocks, 77);
  EXPECT_EQ(port, 2);
  EXPECT_TRUE(args.IsSet("num-blocks"));
  EXPECT_FALSE(args.IsSet("port"));
  ::setenv("SPAR_PORT", "x", 1);
  ArgParser bad("worker", "SPAR_");
  bad.AddInt("port", &port, "");
  absl::Status s = bad.Parse(1, const_cast<char**>(argv), 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("SPAR_PORT"), std::string::npos);
  ::unsetenv("SPAR_NUM_BLOCKS");
  ::unsetenv("SPAR_MODEL");
  ::unsetenv("SPAR_PORT");
}

TEST(LayerSplitTest, ParseAndSplit) {
  auto r = ParseLayerRange("2:5");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, 2);
  EXPECT_EQ(r->last, 5);
  EXPECT_FALSE(ParseLayerRange("5:5").ok());
  EXPECT_FALSE(ParseLayerRange("a:3").ok());
  EXPECT_TRUE(ParseStageLayers("0:2,2:3", 3).ok());
  EXPECT_FALSE(ParseStageLayers("0:2,1:3", 3).ok());
  EXPECT_FALSE(ParseStageLayers("0:2", 3).ok());

  ModelConfig c;
  c.num_hidden_layers = 78;
  c.indexer_types.assign(78, IndexerType::kFull);
  auto split = SplitLayers(c, 4);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(FormatStageLayers(*split), "0:19,19:39,39:58,58:78");
  // A stage may not start on a layer sharing the previous layer's top-k.
  for (int l = 1; l < 78; l += 2) c.indexer_types[l] = IndexerType::kShared;
  split = SplitLayers(c, 4);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(FormatStageLayers(*split), "0:18,18:38,38:58,58:78");
  EXPECT_FALSE(SplitLayers(c, 79).ok());
}

TEST(WorkerConvertTest, PlanRoundTripAndValidation) {
  MicroBatchPlan plan;
  plan.id = 12;
  PlannedSequence p;
  p.step.seq_id = 3;
  p.step.start_pos = 64;  // after a prefix-cache hit
  p.step.tokens = {1, 2, 3};
  p.step.block_table = {7, 4};
  p.step.num_logits = 1;
  SequenceSampling s;
  s.params.temperature = 0.7f;
  s.params.top_k = 5;
  s.params.seed = 99;
  s.prompt_len = 67;
  s.top_logprobs = 2;
  s.cached_tokens.assign(64, 5);
  p.sampling = s;
  plan.seqs.push_back(p);
  plan.release = {8, 9};
  v1::MicroBatch wire;
  PlanToProto(plan, 5, &wire);
  EXPECT_EQ(wire.epoch(), 5u);
  auto back = PlanFromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->id, 12u);
  EXPECT_EQ(back->seqs[0].step.tokens, p.step.tokens);
  EXPECT_EQ(back->seqs[0].sampling->params.seed, 99u);
  EXPECT_EQ(back->seqs[0].sampling->params.top_k, 5);
  EXPECT_EQ(back->seqs[0].sampling->cached_tokens, s.cached_tokens);
  EXPECT_EQ(back->seqs[0].step.start_pos, 64);
  EXPECT_EQ(back->release, plan.release);

  wire.mutable_seqs(0)->set_num_logits(2);
  EXPECT_EQ(PlanFromProto(wire).status().code(), absl::StatusCode::kInvalidArgument);
  wire.mutable_seqs(0)->set_num_logits(1);
  wire.mutable_seqs(0)->mutable_sampling()->set_top_p(0);
  absl::Status bad = PlanFromProto(wire).status();
  EXPECT_NE(std::string(bad.message()).find("sampling.top_p"), std::string::npos) << bad;
}

TEST(WorkerConvertTest, ResultsAndErrors) {
  MicroBatchResult r;
  r.id = 4;
  r.tokens.push_back({7, 11, -0.5f, {{11, -0.5f}, {3, -1.5f}}});
  r.timings.push_back({2, 10, 20});
  v1::MicroBatchResult wire;
  ResultToProto(r, 1, &wire);
  MicroBatchResult back = ResultFromProto(wire);
  EXPECT_TRUE(back.status.ok());
  EXPECT_EQ(back.tokens[0].top, r.tokens[0].top);
  EXPECT_EQ(back.timings[0].compute_ns, 20);
  ErrorToProto(absl::InternalError("boom"), 2, wire.mutable_error());
  back = ResultFromProto(wire);
  EXPECT_EQ(back.status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(back.status.message()).find("stage 2"), std::string::npos);
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(absl::ResourceExhaustedError("full"))).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace spar
