// A GenerationSink that records a request's stream for tests.
#ifndef SPAR_TESTS_SERVICES_COLLECTING_SINK_H_
#define SPAR_TESTS_SERVICES_COLLECTING_SINK_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "services/scheduler/generation_types.h"

namespace spar::testing {

class CollectingSink : public GenerationSink {
 public:
  bool Send(GenerationUpdate u) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& seq = seqs_[u.output.index];
    seq.ids.insert(seq.ids.end(), u.output.token_ids.begin(), u.output.token_ids.end());
    seq.logprobs.insert(seq.logprobs.end(), u.output.logprobs.begin(), u.output.logprobs.end());
    seq.text += u.output.text;
    if (u.output.finish) seq.finish = u.output.finish;
    if (u.prompt) ++prompt_infos_;
    if (u.usage) usage_ = u.usage;
    ++updates_;
    return !gone_;
  }
  void Close(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    cv_.notify_all();
  }
  // Waits for Close; false on timeout.
  bool Wait(absl::Duration timeout = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] { return status_.has_value(); });
  }
  void set_gone() {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
  }

  struct Seq {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::string text;
    std::optional<FinishInfo> finish;
  };
  std::map<int, Seq> seqs() {
    std::lock_guard<std::mutex> lock(mu_);
    return seqs_;
  }
  absl::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_.value_or(absl::UnknownError("open"));
  }
  std::optional<UsageInfo> usage() {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_;
  }
  int prompt_infos() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompt_infos_;
  }
  int updates() {
    std::lock_guard<std::mutex> lock(mu_);
    return updates_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Seq> seqs_;
  std::optional<absl::Status> status_;
  std::optional<UsageInfo> usage_;
  int prompt_infos_ = 0, updates_ = 0;
  bool gone_ = false;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_COLLECTING_SINK_H_
