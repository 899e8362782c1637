// TpMembership: the stage leader's registry of its tensor-parallel peers.
#include "services/worker/tp_membership.h"

#include <thread>

#include "gtest/gtest.h"

namespace spar {
namespace {

TEST(TpMembershipTest, WaitsForEveryRankAndNamesTheMissingOnes) {
  TpMembership m(3);
  uint64_t version = 0;
  auto missing = m.WaitForAll(absl::Now() + absl::Milliseconds(50), &version);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("rank(s) 1, 2 of 3"), std::string::npos) << missing.status();
  ASSERT_TRUE(m.Join(2, 3, "10.0.0.2:50062").ok());
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(m.Join(1, 3, "10.0.0.1:50061").ok());
  });
  auto all = m.WaitForAll(absl::Now() + absl::Seconds(10), &version);
  late.join();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<std::string>{"10.0.0.1:50061", "10.0.0.2:50062"}));
  EXPECT_EQ(version, m.version());
  EXPECT_TRUE(m.complete());
}

TEST(TpMembershipTest, LeavingOrReplacingAMemberChangesTheVersion) {
  TpMembership m(2);
  std::vector<std::string> changes;
  m.set_on_change([&](const std::string& what) { changes.push_back(what); });
  auto first = m.Join(1, 2, "a:1");
  ASSERT_TRUE(first.ok());
  const uint64_t formed = m.version();
  // A restarted peer registers before its old stream is noticed gone: the
  // new registration wins and the old stream's end is ignored.
  auto second = m.Join(1, 2, "a:2");
  ASSERT_TRUE(second.ok());
  EXPECT_NE(m.version(), formed);
  const uint64_t replaced = m.version();
  m.Leave(1, *first);
  EXPECT_EQ(m.version(), replaced);
  EXPECT_TRUE(m.complete());
  m.Leave(1, *second);
  EXPECT_FALSE(m.complete());
  EXPECT_NE(m.version(), replaced);
  EXPECT_EQ(changes, (std::vector<std::string>{"rank 1 joined from a:1", "rank 1 joined from a:2", "rank 1 left"}));
}

TEST(TpMembershipTest, RefusesWrongRanksAndSizes) {
  TpMembership m(4);
  EXPECT_EQ(m.Join(0, 4, "x:1").status().code(), absl::StatusCode::kInvalidArgument);  // rank 0 is the leader
  EXPECT_EQ(m.Join(4, 4, "x:1").status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_size = m.Join(1, 2, "x:1");
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong_size.status().message().find("--tp-size 2"), std::string::npos) << wrong_size.status();
}

TEST(TpMembershipTest, CloseWakesAWaiter) {
  TpMembership m(2);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    m.Close();
  });
  auto r = m.WaitForAll(absl::Now() + absl::Seconds(30));
  closer.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(m.Join(1, 2, "x:1").status().code(), absl::StatusCode::kUnavailable);
}

TEST(HostOfGrpcPeerTest, ParsesIpv4AndIpv6AndRefusesTheRest) {
  EXPECT_EQ(*HostOfGrpcPeer("ipv4:10.1.2.3:41234"), "10.1.2.3");
  EXPECT_EQ(*HostOfGrpcPeer("ipv6:[::1]:5"), "[::1]");
  EXPECT_EQ(*HostOfGrpcPeer("ipv6:%5B::1%5D:5"), "[::1]");
  EXPECT_FALSE(HostOfGrpcPeer("unix:/tmp/sock").ok());
  EXPECT_FALSE(HostOfGrpcPeer("ipv4:nonsense").ok());
}

}  // namespace
}  // namespace spar
