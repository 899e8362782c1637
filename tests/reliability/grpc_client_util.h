// Client-side helpers of the reliability tests: stream a Generate call and
// record everything about it (tokens, the order of messages, how and when
// it ended), read GetLoad, wait for the scheduler to be idle, convert the
// engine's request type to the wire, read a process's resident memory.
#ifndef SPAR_TESTS_RELIABILITY_GRPC_CLIENT_UTIL_H_
#define SPAR_TESTS_RELIABILITY_GRPC_CLIENT_UTIL_H_

#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "spar/v1/generation.grpc.pb.h"
#include "tests/engine/shared_tiny_model.h"
#include "tests/engine/test_util.h"

namespace spar::testing {

// Multiplies the time budgets of the multi-process tests by
// SPAR_TEST_TIME_SCALE (default 1): tools/sanitize.sh runs them with the
// daemons under ASan + UBSan, where the model computes ~10-20x slower.
// Budgets for work to finish scale; the promptness a test promises for a
// reaction (a failure noticed within seconds) does not.
inline absl::Duration Scaled(absl::Duration d) {
  static const double scale = [] {
    const char* v = std::getenv("SPAR_TEST_TIME_SCALE");
    const double s = v != nullptr ? std::atof(v) : 1.0;
    return s >= 1.0 ? s : 1.0;
  }();
  return d * scale;
}

// make-tiny's GLM-5 (seed 11, as the cluster tests), written once per test
// binary.
inline const std::string& ReliabilityModel() { return SharedTinyModel("reliability_model", MakeTinyOptions{.seed = 11}); }

inline v1::GenerateRequest ToWire(const GenerationRequest& r, const std::string& id) {
  v1::GenerateRequest p;
  p.set_request_id(id);
  p.mutable_token_ids()->mutable_ids()->Add(r.prompt.begin(), r.prompt.end());
  v1::SamplingParams* s = p.mutable_sampling();
  s->set_temperature(r.sampling.temperature);
  s->set_top_k(r.sampling.top_k);
  s->set_top_p(r.sampling.top_p);
  s->set_min_p(r.sampling.min_p);
  s->set_repetition_penalty(r.sampling.repetition_penalty);
  s->set_frequency_penalty(r.sampling.frequency_penalty);
  s->set_presence_penalty(r.sampling.presence_penalty);
  if (r.seed) s->set_seed(*r.seed);
  p.mutable_stopping()->set_max_tokens(r.max_tokens);
  p.mutable_stopping()->mutable_stop_token_ids()->Add(r.stop_token_ids.begin(), r.stop_token_ids.end());
  p.mutable_stopping()->set_ignore_eos(r.ignore_eos);
  return p;
}

struct StreamRecord {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string request_id;
  int messages = 0;
  int finishes = 0;          // messages carrying a FinishInfo (one per sequence)
  int usages = 0;            // messages carrying Usage (one per request)
  bool id_mismatch = false;  // a message for another request id
  v1::FinishInfo finish;
  v1::Usage usage;  // of the last message carrying one
  absl::Time start, first_message = absl::InfiniteFuture(), end;
};

// Streams one request; `metadata` is added to the call. `on_first` (may be
// empty) runs once the first message arrived.
template <typename OnFirst>
StreamRecord StreamCall(v1::Generation::Stub* stub, const v1::GenerateRequest& req, absl::Duration deadline,
                        grpc::ClientContext* ctx, OnFirst on_first) {
  StreamRecord out;
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  out.start = absl::Now();
  auto reader = stub->Generate(ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (out.messages++ == 0) {
      out.first_message = absl::Now();
      out.request_id = resp.request_id();
      on_first();
    }
    if (resp.request_id() != out.request_id) out.id_mismatch = true;
    out.ids.insert(out.ids.end(), resp.output().token_ids().begin(), resp.output().token_ids().end());
    if (resp.output().has_finish()) {
      ++out.finishes;
      out.finish = resp.output().finish();
    }
    if (resp.has_usage()) {
      ++out.usages;
      out.usage = resp.usage();
    }
  }
  out.status = reader->Finish();
  out.end = absl::Now();
  return out;
}

inline StreamRecord Stream(v1::Generation::Stub* stub, const v1::GenerateRequest& req, absl::Duration deadline,
                           const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  grpc::ClientContext ctx;
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  return StreamCall(stub, req, deadline, &ctx, [] {});
}

inline v1::GetLoadResponse Load(v1::Generation::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::GetLoadResponse r;
  grpc::Status s = stub->GetLoad(&ctx, v1::GetLoadRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r;
}

inline bool Idle(const v1::GetLoadResponse& l) {
  return l.used_kv_blocks() == 0 && l.num_running_requests() == 0 && l.num_waiting_requests() == 0 &&
         l.micro_batches_in_flight() == 0;
}

// Time until the scheduler holds no KV block and runs nothing (or timeout:
// InfiniteDuration).
inline absl::Duration TimeUntilIdle(v1::Generation::Stub* stub, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < timeout) {
    if (Idle(Load(stub))) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::InfiniteDuration();
}

// Resident set size of a process in KiB (0 when unreadable).
inline int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

// The engine's token ids of one generation.
inline std::vector<int32_t> Ids(const Generation& g) {
  std::vector<int32_t> ids;
  for (const auto& t : g.tokens) ids.push_back(t.id);
  return ids;
}

inline bool IsPrefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& full) {
  return prefix.size() <= full.size() && std::equal(prefix.begin(), prefix.end(), full.begin());
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_RELIABILITY_GRPC_CLIENT_UTIL_H_
