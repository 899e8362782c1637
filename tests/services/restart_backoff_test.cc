#include "services/cli/restart_backoff.h"

#include <vector>

#include "gtest/gtest.h"

namespace spar {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RestartBackoffTest, DoublesUpToTheCapWhileTheDaemonKeepsDying) {
  RestartBackoff b({absl::Milliseconds(500), absl::Seconds(4), absl::Seconds(60)});
  absl::Time now = kT0;
  b.Started(now);
  std::vector<absl::Duration> delays;
  for (int i = 0; i < 6; ++i) {
    now += absl::Seconds(1);  // dies a second after each start
    const absl::Duration d = b.Died(now);
    delays.push_back(d);
    now += d;
    b.Started(now);
  }
  EXPECT_EQ(delays, (std::vector<absl::Duration>{absl::Milliseconds(500), absl::Seconds(1), absl::Seconds(2),
                                                 absl::Seconds(4), absl::Seconds(4), absl::Seconds(4)}));
}

TEST(RestartBackoffTest, ADaemonThatStayedUpStartsOverAtTheInitialDelay) {
  RestartBackoff b({absl::Milliseconds(500), absl::Seconds(30), absl::Seconds(60)});
  b.Started(kT0);
  EXPECT_EQ(b.Died(kT0 + absl::Seconds(1)), absl::Milliseconds(500));
  b.Started(kT0 + absl::Seconds(2));
  EXPECT_EQ(b.Died(kT0 + absl::Seconds(3)), absl::Seconds(1));
  b.Started(kT0 + absl::Seconds(4));
  // Up for 59 s: still crash-looping as far as the policy goes.
  EXPECT_EQ(b.Died(kT0 + absl::Seconds(63)), absl::Seconds(2));
  b.Started(kT0 + absl::Seconds(65));
  // Up for 60 s: healthy again.
  EXPECT_EQ(b.Died(kT0 + absl::Seconds(125)), absl::Milliseconds(500));
}

}  // namespace
}  // namespace spar
