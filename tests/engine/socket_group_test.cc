// SocketGroup: the cross-process cpu all-reduce (engine/socket_group.h).
// Ranks are threads here, each with its own sockets exactly as separate
// processes would have; tests/services/tp_cluster_test.cc runs it across
// real worker processes.
#include "engine/socket_group.h"

#include <chrono>
#include <thread>

#include "base/rng.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

constexpr absl::Duration kJoin = absl::Seconds(10);

// Forms a group of `size` ranks over loopback; groups[r] is rank r's.
std::vector<std::shared_ptr<SocketGroup>> FormGroup(int size, absl::Duration op_timeout = absl::Seconds(10)) {
  auto listener = SocketGroupListener::Open("127.0.0.1");
  EXPECT_TRUE(listener.ok()) << listener.status();
  if (!listener.ok()) return {};
  std::vector<std::shared_ptr<SocketGroup>> groups(size);
  std::vector<std::thread> peers;
  for (int r = 1; r < size; ++r) {
    peers.emplace_back([&, r] {
      auto g = SocketGroup::Join("127.0.0.1", (*listener)->port(), (*listener)->secret(), r, size, kJoin, op_timeout);
      EXPECT_TRUE(g.ok()) << g.status();
      if (g.ok()) groups[r] = *g;
    });
  }
  auto lead = SocketGroup::Lead(listener->get(), size, kJoin, op_timeout);
  EXPECT_TRUE(lead.ok()) << lead.status();
  if (lead.ok()) groups[0] = *lead;
  for (auto& t : peers) t.join();
  return groups;
}

TEST(SocketGroupTest, SumIsTheRankOrderSumOnEveryRank) {
  for (int size : {2, 3, 4}) {
    auto groups = FormGroup(size);
    ASSERT_EQ(groups.size(), static_cast<size_t>(size));
    for (const auto& g : groups) ASSERT_NE(g, nullptr);
    for (size_t n : {size_t{1}, size_t{1000}, size_t{300000}}) {  // 300000 floats: more than a socket buffer
      std::vector<std::vector<float>> data(size, std::vector<float>(n));
      Rng rng(n + size);
      for (auto& d : data) {
        for (float& x : d) x = static_cast<float>(rng.Uniform() * 2 - 1) * 1000.0f;
      }
      std::vector<const float*> inputs;
      for (const auto& d : data) inputs.push_back(d.data());
      std::vector<float> want(n);
      RankOrderSum(inputs, n, want.data());
      // InProcessGroup gives the same bits (the reference every backend matches).
      {
        std::vector<std::vector<float>> copy = data;
        InProcessGroup in_process(size);
        std::vector<std::thread> t;
        for (int r = 0; r < size; ++r) {
          t.emplace_back([&, r] { EXPECT_TRUE(in_process.AllReduceSum(r, copy[r].data(), n).ok()); });
        }
        for (auto& th : t) th.join();
        EXPECT_EQ(copy[0], want);
      }
      std::vector<absl::Status> status(size);
      std::vector<std::thread> threads;
      for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] { status[r] = groups[r]->AllReduceSum(r, data[r].data(), n); });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < size; ++r) {
        ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
        EXPECT_EQ(data[r], want) << "size " << size << " n " << n << " rank " << r;
      }
    }
  }
}

TEST(SocketGroupTest, LostPeerFailsTheLeaderAtOnce) {
  auto groups = FormGroup(3, absl::Seconds(60));
  ASSERT_EQ(groups.size(), 3u);
  // Rank 2 goes away (its process dies: the sockets close) while ranks 0
  // and 1 all-reduce: both fail quickly, not after the 60 s deadline.
  groups[2].reset();
  std::vector<float> a(16, 1.0f), b(16, 2.0f);
  absl::Status s0, s1;
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] { s1 = groups[1]->AllReduceSum(1, b.data(), b.size()); });
  s0 = groups[0]->AllReduceSum(0, a.data(), a.size());
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s0.code(), absl::StatusCode::kUnavailable) << s0;
  EXPECT_NE(s0.message().find("rank 2"), std::string::npos) << s0;
  EXPECT_FALSE(s1.ok());
  // Broken for good: the next call fails at once.
  EXPECT_EQ(groups[0]->AllReduceSum(0, a.data(), a.size()).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(groups[0]->health().ok());
}

TEST(SocketGroupTest, StalledPeerHitsTheDeadline) {
  auto groups = FormGroup(2, absl::Milliseconds(300));
  ASSERT_EQ(groups.size(), 2u);
  std::vector<float> a(4, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = groups[0]->AllReduceSum(0, a.data(), a.size());  // rank 1 never calls
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(SocketGroupTest, BreakWakesABlockedRank) {
  auto groups = FormGroup(2, absl::Seconds(60));
  ASSERT_EQ(groups.size(), 2u);
  std::vector<float> a(4, 1.0f);
  absl::Status s;
  std::thread t([&] { s = groups[0]->AllReduceSum(0, a.data(), a.size()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  groups[0]->Break(absl::UnavailableError("peer rank 1 left the group"));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST(SocketGroupTest, WrongSecretIsRefusedAndMissingRanksAreNamed) {
  auto listener = SocketGroupListener::Open("127.0.0.1");
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string wrong(32, '0');
  absl::StatusOr<std::shared_ptr<SocketGroup>> peer;
  std::thread t([&] {
    peer = SocketGroup::Join("127.0.0.1", (*listener)->port(), wrong, 1, 2, absl::Seconds(5), absl::Seconds(5));
  });
  auto lead = SocketGroup::Lead(listener->get(), 2, absl::Milliseconds(800), absl::Seconds(5));
  t.join();
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kPermissionDenied) << peer.status();
  ASSERT_FALSE(lead.ok());
  EXPECT_EQ(lead.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(lead.status().message().find("rank(s) 1"), std::string::npos) << lead.status();
}

TEST(SocketGroupTest, CancelStopsAFormation) {
  auto listener = SocketGroupListener::Open("127.0.0.1");
  ASSERT_TRUE(listener.ok());
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*listener)->Cancel();
  });
  auto lead = SocketGroup::Lead(listener->get(), 2, absl::Seconds(60), absl::Seconds(5));
  t.join();
  EXPECT_EQ(lead.status().code(), absl::StatusCode::kCancelled);
}

// The engine on a SocketGroup gives exactly the logits it gives on an
// InProcessGroup: the worker TP cluster test relies on this bit-identity.
TEST(SocketGroupTest, EngineLogitsEqualTheInProcessGroup) {
  MakeTinyOptions o;
  o.arch = ModelArch::kGlmMoeDsa;
  o.seed = 5;
  o.out_dir = testing::TempDir("socket_group_engine");
  ASSERT_TRUE(MakeTinyModel(o).ok());
  Rng rng(9);
  std::vector<int32_t> prompt(70);
  for (auto& t : prompt) t = static_cast<int32_t>(rng.Below(288));
  auto run = [&](std::vector<std::shared_ptr<CpuGroup>> groups) {
    std::vector<std::vector<std::vector<std::vector<float>>>> logits(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        EngineOptions eo;
        eo.model.num_blocks = 16;
        eo.backend_options.tp = TpRank{r, 2};
        eo.backend_options.cpu_group = groups[r];
        auto engine = Engine::Create(o.out_dir, eo);
        ASSERT_TRUE(engine.ok()) << engine.status();
        auto l = (*engine)->PromptLogits({prompt}, 4);
        ASSERT_TRUE(l.ok()) << l.status();
        logits[r] = std::move(*l);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(logits[0], logits[1]);
    return logits[0];
  };
  auto in_process = std::make_shared<InProcessGroup>(2);
  const auto want = run({in_process, in_process});
  auto sockets = FormGroup(2);
  ASSERT_EQ(sockets.size(), 2u);
  const auto got = run({sockets[0], sockets[1]});
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace spar
