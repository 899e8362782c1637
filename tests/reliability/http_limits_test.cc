// The HTTP front door under hostile load (issue 20), against a real
// spar-scheduler over loopback: decompression bombs and oversized chunked
// bodies are refused (413) without the scheduler's memory growing, a
// thousand clients trickling their headers do not slow anyone else down,
// two thousand SSE streams at once all finish, and connections past the
// cap get a clean 503. docs/reliability.md lists each with its numbers.
#include <httplib.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sanitizers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/reliability/grpc_client_util.h"
#include "tests/reliability/raw_http.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;
using testing::RawConnection;
using testing::RawRequest;
using testing::ReliabilityModel;

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

std::unique_ptr<testing::TestCluster> StartCluster(const std::string& name, std::vector<std::string> flags,
                                                   int64_t num_blocks = 64) {
  flags.insert(flags.end(), {"--served-model-name", "tiny"});
  return testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 1, .num_blocks = num_blocks, .scheduler_flags = flags}, name);
}

std::string SmallCompletion() { return R"({"prompt":"The capital of France is","max_tokens":2,"temperature":0})"; }

// A normal request answers 200 (the server is unhurt).
void ExpectServes(int port, const std::string& after) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  auto r = c.Post("/v1/completions", SmallCompletion(), "application/json");
  ASSERT_TRUE(r) << "no answer after " << after;
  EXPECT_EQ(r->status, 200) << after << ": " << r->body;
}

TEST(HttpLimitsTest, GzipBombAndOversizedChunkedBodyAre413WithoutRaisingPeakMemory) {
  auto cluster = StartCluster("http_bomb", {});
  ASSERT_NE(cluster, nullptr);
  const int port = PortOf(cluster->http_address());
  ExpectServes(port, "start");
  const pid_t pid = cluster->scheduler()->pid();
  const int64_t before = testing::PeakRssKib(pid);
  ASSERT_GT(before, 0);

  // 512 MiB of JSON once inflated, ~0.5 MB on the wire.
  const std::string bomb = testing::GzipBomb("{\"prompt\":\"", size_t{512} << 20);
  std::cout << "[bomb] " << bomb.size() << " bytes of gzip inflating to 512 MiB\n";
  ASSERT_LT(bomb.size(), 1u << 20);
  {
    RawConnection c(port);
    const absl::Time start = absl::Now();
    // The server may answer before it has read it all; then it reads on
    // and drops the rest, so the whole send goes through.
    c.Send(RawRequest("POST", "/v1/completions", bomb, "Content-Encoding: gzip\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r) << c.received();
    EXPECT_EQ(r->status, 413) << r->body;
    EXPECT_NE(r->body.find("request_too_large"), std::string::npos) << r->body;
    std::cout << "[bomb] 413 after " << absl::FormatDuration(absl::Now() - start) << ": " << r->body << "\n";
  }

  // 48 MiB of chunked body (16 MiB is the limit), sent while the answer
  // is read: the server counts the chunks as they come.
  {
    RawConnection c(port);
    ASSERT_TRUE(
        c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n"));
    std::atomic<bool> stop{false};
    size_t sent = 0;
    std::thread sender([&] {
      const std::string chunk(64 << 10, 'a');
      const std::string framed = absl::StrCat(absl::Hex(chunk.size()), "\r\n", chunk, "\r\n");
      if (!c.Send(absl::StrCat("c\r\n{\"prompt\":\"a\r\n"))) return;
      for (int i = 0; i < 768 && !stop; ++i) {
        if (!c.Send(framed)) return;
        sent += chunk.size();
      }
    });
    auto r = c.ReadResponse();
    stop = true;
    sender.join();
    ASSERT_TRUE(r) << c.received();
    EXPECT_EQ(r->status, 413) << r->body;
    std::cout << "[chunked] 413 after sending " << sent / (1 << 20) << " MiB: " << r->body << "\n";
  }
  // A Content-Length over the limit is refused before any body is read.
  {
    RawConnection c(port);
    ASSERT_TRUE(c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n{\"prompt\":"));
    auto r = c.ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(r) << c.received();
    EXPECT_EQ(r->status, 413) << r->body;
  }

  const int64_t after = testing::PeakRssKib(pid);
  std::cout << "[memory] scheduler peak RSS " << before << " KiB -> " << after << " KiB (+" << (after - before) / 1024
            << " MiB)\n";
  // Under ASan freed memory stays resident (its quarantine): only printed.
  if (!kAsanBuild) {
    EXPECT_LT(after - before, 100 * 1024) << "the bodies were held in memory";
  }
  ExpectServes(port, "the bodies");
}

TEST(HttpLimitsTest, SlowHeaderClientsLeaveOtherRequestsFastAndAreCutAtTheHeaderTimeout) {
  constexpr int kSlow = 1000;
  ASSERT_GT(testing::RaiseFdLimit(), kSlow + 256) << "raise the open-file limit (ulimit -n)";
  auto cluster = StartCluster("http_slow", {"--http-header-timeout-s", "6"});
  ASSERT_NE(cluster, nullptr);
  const int port = PortOf(cluster->http_address());
  ExpectServes(port, "start");

  // Each slow client sends its request line, then a header line every 2 s
  // (at 1 s, 3 s, 5 s, ...): never a whole header. A server that restarted its
  // timer on every line would never answer them. Ticks fall on odd seconds and
  // skip a client once the server has answered it: writing to a connection the
  // server already closed draws a reset, and a reset discards the 408 the
  // client has not read yet (seen as 859 of 1000 under the sanitizers).
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(slow.back()->ok()) << i;
    ASSERT_TRUE(slow.back()->Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"));
  }
  const absl::Time attack_start = absl::Now();
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (int line = 0; !stop; ++line) {
      const absl::Time tick = attack_start + absl::Seconds(1 + 2 * line);
      while (!stop && absl::Now() < tick) absl::SleepFor(absl::Milliseconds(50));
      for (auto& c : slow) {
        if (stop) break;
        if (!c->HasUnreadInput()) c->Send(absl::StrCat("X-Slow-", line, ": 1\r\n"));
      }
    }
  });
  const Json chat = {{"model", "tiny"},
                     {"messages", Json::array({{{"role", "user"}, {"content", "What is 2+2?"}}})},
                     {"max_tokens", 2},
                     {"temperature", 0}};
  absl::Duration slowest;
  for (int i = 0; i < 4; ++i) {
    absl::SleepFor(absl::Milliseconds(800));
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    const absl::Time start = absl::Now();
    auto r = c.Post("/v1/chat/completions", chat.dump(), "application/json");
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(r) << "no answer during the attack";
    EXPECT_EQ(r->status, 200) << r->body;
    // The answer's own compute is what takes time (scaled under the
    // sanitizers); the slow clients add none.
    EXPECT_LT(took, testing::Scaled(absl::Seconds(1)))
        << "a chat request took " << took << " among " << kSlow << " slow clients";
    slowest = std::max(slowest, took);
  }
  std::cout << "[slow headers] " << kSlow << " slow clients; slowest chat answer " << slowest << "\n";

  // At the header timeout each slow client gets a 408 and is closed.
  int cut = 0, got_408 = 0;
  for (auto& c : slow) {
    auto r = c->ReadResponse(absl::Seconds(12) - (absl::Now() - attack_start));
    if (r && r->status == 408) ++got_408;
    if (c->ReadToEof(absl::Seconds(1))) ++cut;
  }
  stop = true;
  trickle.join();
  std::cout << "[slow headers] " << got_408 << " answered 408, " << cut << " closed after "
            << absl::Now() - attack_start << "\n";
  EXPECT_EQ(got_408, kSlow);
  EXPECT_EQ(cut, kSlow);
  slow.clear();
  ExpectServes(port, "the attack");
}

// One SSE stream of the fleet.
struct FleetStream {
  int fd = -1;
  std::string request;
  size_t sent = 0;
  std::string received;
  bool header = false;
  bool finished = false;
};

TEST(HttpLimitsTest, TwoThousandConcurrentStreamsEachEndWithExactlyOneDone) {
  // Under the sanitizers the model computes ~10x slower: 400 streams there
  // look for memory errors, the 2,000 are the main suite's.
  const int kStreams = kAsanBuild ? 400 : 2000;
  ASSERT_GT(testing::RaiseFdLimit(), kStreams + 256) << "raise the open-file limit (ulimit -n)";
  // Every stream is open at once (each got its 200 when it was queued);
  // the scheduler generates for 256 of them at a time, one token each
  // (the cpu engine's decode steps, not HTTP, would dominate the time).
  auto cluster = StartCluster("http_fleet", {"--max-running", "256", "--max-queue", "2048"}, /*num_blocks=*/512);
  ASSERT_NE(cluster, nullptr);
  const int port = PortOf(cluster->http_address());
  ExpectServes(port, "start");

  std::vector<FleetStream> fleet(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    const Json body = {{"prompt", Json::array({5 + i % 300})},
                       {"max_tokens", 1},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true}};
    fleet[i].request = RawRequest("POST", "/v1/completions", body.dump());
    fleet[i].fd = testing::ConnectLoopback(port, /*nonblocking=*/true);
    ASSERT_GE(fleet[i].fd, 0) << i;
  }
  const absl::Time start = absl::Now();
  const absl::Time until = start + testing::Scaled(absl::Seconds(90));
  int finished = 0, open_streams = 0, peak_open = 0;
  std::vector<pollfd> polls;
  std::vector<int> index;
  while (finished < kStreams && absl::Now() < until) {
    polls.clear();
    index.clear();
    for (int i = 0; i < kStreams; ++i) {
      FleetStream& s = fleet[i];
      if (s.finished) continue;
      polls.push_back({s.fd, static_cast<short>(POLLIN | (s.sent < s.request.size() ? POLLOUT : 0)), 0});
      index.push_back(i);
    }
    if (::poll(polls.data(), polls.size(), 200) < 0) continue;
    for (size_t k = 0; k < polls.size(); ++k) {
      FleetStream& s = fleet[index[k]];
      if (polls[k].revents & POLLOUT) {
        const ssize_t n = ::send(s.fd, s.request.data() + s.sent, s.request.size() - s.sent, MSG_NOSIGNAL);
        if (n > 0) s.sent += static_cast<size_t>(n);
      }
      if (!(polls[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[16 << 10];
      const ssize_t n = ::recv(s.fd, buf, sizeof(buf), 0);
      if (n > 0) s.received.append(buf, static_cast<size_t>(n));
      if (!s.header && s.received.find("\r\n\r\n") != std::string::npos) {
        s.header = true;
        peak_open = std::max(peak_open, ++open_streams);
      }
      if (n <= 0 || testing::ParseResponse(s.received, false)) {
        s.finished = true;
        ++finished;
        if (s.header) --open_streams;
        ::close(s.fd);
      }
    }
  }
  const absl::Duration took = absl::Now() - start;
  int ok = 0;
  for (int i = 0; i < kStreams; ++i) {
    FleetStream& s = fleet[i];
    if (!s.finished) ::close(s.fd);
    auto r = testing::ParseResponse(s.received, true);
    if (!r || r->status != 200 || !r->chunked) {
      ADD_FAILURE() << "stream " << i << " did not end in a whole chunked 200: " << s.received.substr(0, 300);
      continue;
    }
    size_t dones = 0;
    for (size_t p = r->body.find("data: [DONE]"); p != std::string::npos; p = r->body.find("data: [DONE]", p + 1)) {
      ++dones;
    }
    const bool last = absl::EndsWith(r->body, "data: [DONE]\n\n");
    const bool finished = r->body.find("\"finish_reason\":\"length\"") != std::string::npos;
    if (dones != 1 || !last || !finished) {
      ADD_FAILURE() << "stream " << i << ": " << dones << " [DONE] events" << (last ? "" : ", not at the end")
                    << (finished ? "" : ", no finish_reason") << ": " << r->body.substr(0, 300);
      continue;
    }
    ++ok;
  }
  std::cout << "[streams] " << ok << " of " << kStreams << " streams ended with exactly one [DONE] in " << took
            << "; at most " << peak_open << " open at once\n";
  EXPECT_EQ(ok, kStreams);
  ExpectServes(port, "the streams");
}

TEST(HttpLimitsTest, ConnectionsBeyondTheCapAre503AndThenClosed) {
  constexpr int kCap = 16;
  auto cluster = StartCluster("http_cap", {"--http-max-connections", absl::StrCat(kCap)});
  ASSERT_NE(cluster, nullptr);
  const int port = PortOf(cluster->http_address());
  // kCap kept-alive connections, each answered once (so the server holds them).
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < kCap; ++i) {
    held.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(held.back()->Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = held.back()->ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->status, 200) << i;
  }
  RawConnection extra(port);
  ASSERT_TRUE(extra.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = extra.ReadResponse(absl::Seconds(10));
  ASSERT_TRUE(r) << extra.received();
  EXPECT_EQ(r->status, 503);
  Json j = Json::parse(r->body, nullptr, false);
  EXPECT_EQ(j["error"]["code"], "too_many_connections") << r->body;
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(extra.ReadToEof(absl::Seconds(5))) << "the refused connection stays open";
  extra.Close();
  // Room again once one goes.
  held.pop_back();
  bool served = false;
  for (int attempt = 0; attempt < 100 && !served; ++attempt) {
    RawConnection again(port);
    again.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    auto a = again.ReadResponse(absl::Seconds(5));
    served = a && a->status == 200;
    if (!served) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace spar
