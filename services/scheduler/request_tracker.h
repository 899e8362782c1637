// Requests as clients see them: each request's n sequences, their text
// (incremental detokenization, stop strings), logprobs, finish reasons and
// usage, turned into GenerationUpdates for the request's sink. It consumes
// the SchedulerCore's sequence events and tells the caller which sequences
// the core must end (a stop string matched; a sibling failed).
//
// Thread-compatible (the Scheduler calls it under its lock).
#ifndef SPAR_SERVICES_SCHEDULER_REQUEST_TRACKER_H_
#define SPAR_SERVICES_SCHEDULER_REQUEST_TRACKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "services/scheduler/generation_types.h"
#include "services/scheduler/request_observer.h"
#include "services/scheduler/scheduler_core.h"
#include "services/scheduler/stop_strings.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace spar {

class RequestTracker {
 public:
  // `tokenizer` (may be null: no text output) and `observer` (may be null)
  // must outlive the tracker.
  explicit RequestTracker(const Tokenizer* tokenizer, RequestObserver* observer = nullptr)
      : tokenizer_(tokenizer), observer_(observer) {}

  bool Contains(const std::string& request_id) const { return requests_.count(request_id) > 0; }
  size_t size() const { return requests_.size(); }
  // The request a live sequence belongs to; null if none.
  const std::string* RequestOf(int64_t seq) const;

  // Registers an admitted request; seq_ids[i] is sequence index i.
  void Add(const std::string& request_id, const GenerateParams& params, std::vector<int32_t> prompt_ids,
           const std::vector<int64_t>& seq_ids, std::shared_ptr<GenerationSink> sink);

  // Turns core events into updates. Returns sequences the core must end.
  std::vector<int64_t> Apply(const std::vector<SeqEvent>& events);

  // Ends a request with `status` (abort, client gone, failure). Returns its
  // sequences that are still live in the core; empty if unknown.
  std::vector<int64_t> End(const std::string& request_id, const absl::Status& status);

  // Ends every request with `status` (shutdown).
  std::vector<int64_t> EndAll(const absl::Status& status);

 private:
  struct Sequence {
    int64_t seq = 0;
    int index = 0;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::unique_ptr<StopStringMatcher> stops;
    bool finished = false;
    int num_output = 0;
    int cached_prompt_tokens = 0;  // shared from the prefix cache
  };
  struct Request {
    std::string id;
    bool output_text = true, output_logprobs = false;
    int top_logprobs = 0;
    PromptInfo prompt;
    bool prompt_sent = false;
    std::vector<Sequence> seqs;
    int num_finished = 0;
    std::shared_ptr<GenerationSink> sink;
  };

  // Sends one update; on the last sequence's finish adds usage and closes.
  // Returns false if the sink is gone (the request was then ended).
  bool Emit(Request& r, SequenceUpdate update, std::vector<int64_t>* to_end);
  std::string Text(Sequence& q, int32_t token);
  std::string FinalText(Sequence& q);
  void Erase(const std::string& request_id);

  const Tokenizer* tokenizer_;
  RequestObserver* observer_;
  std::unordered_map<std::string, Request> requests_;
  std::unordered_map<int64_t, std::pair<std::string, int>> by_seq_;  // seq -> (request, index)
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_REQUEST_TRACKER_H_
