#include "services/scheduler/request_tracker.h"

namespace spar {

void RequestTracker::Add(const std::string& request_id, const GenerateParams& params, std::vector<int32_t> prompt_ids,
                         const std::vector<int64_t>& seq_ids, std::shared_ptr<GenerationSink> sink) {
  Request r;
  r.id = request_id;
  r.output_text = params.output_text && tokenizer_ != nullptr;
  r.output_logprobs = params.output_logprobs;
  r.top_logprobs = params.top_logprobs;
  const int num_prompt_tokens = static_cast<int>(prompt_ids.size());
  r.prompt.num_prompt_tokens = num_prompt_tokens;
  if (params.echo_prompt_ids) r.prompt.prompt_ids = std::move(prompt_ids);
  r.sink = std::move(sink);
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    Sequence q;
    q.seq = seq_ids[i];
    q.index = static_cast<int>(i);
    if (r.output_text) {
      q.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_, params.skip_special_tokens);
    }
    q.stops = std::make_unique<StopStringMatcher>(params.stop_strings, params.include_stop_strings);
    by_seq_[q.seq] = {request_id, static_cast<int>(i)};
    r.seqs.push_back(std::move(q));
  }
  requests_[request_id] = std::move(r);
  if (observer_) observer_->OnAdmitted(request_id, num_prompt_tokens, static_cast<int>(seq_ids.size()));
}

const std::string* RequestTracker::RequestOf(int64_t seq) const {
  auto it = by_seq_.find(seq);
  return it == by_seq_.end() ? nullptr : &it->second.first;
}

std::string RequestTracker::Text(Sequence& q, int32_t token) {
  if (!q.detok) return "";
  // Model vocabularies are padded beyond the tokenizer; such ids print
  // nothing, as in Hugging Face's decode.
  auto delta = q.detok->Add(token);
  return delta.ok() ? *delta : std::string();
}

std::string RequestTracker::FinalText(Sequence& q) {
  std::string out;
  if (q.detok) out = q.stops->Add(q.detok->Finish());
  if (!q.stops->matched()) out += q.stops->Flush();
  return out;
}

bool RequestTracker::Emit(Request& r, SequenceUpdate update, std::vector<int64_t>* to_end) {
  GenerationUpdate u;
  u.request_id = r.id;
  if (!r.prompt_sent) {
    u.prompt = r.prompt;
    r.prompt_sent = true;
  }
  const bool last = update.finish.has_value() && r.num_finished == static_cast<int>(r.seqs.size());
  if (last) {
    UsageInfo usage;
    usage.prompt_tokens = r.prompt.num_prompt_tokens;
    // The prompt is counted once: as the first sequence processed it (the
    // others of n > 1 share it anyway).
    usage.cached_prompt_tokens = r.seqs.front().cached_prompt_tokens;
    for (const Sequence& q : r.seqs) usage.completion_tokens += q.num_output;
    u.usage = usage;
  }
  u.output = std::move(update);
  if (!r.sink->Send(std::move(u))) {
    const std::string id = r.id;
    auto ended = End(id, absl::CancelledError("the client went away"));
    to_end->insert(to_end->end(), ended.begin(), ended.end());
    return false;
  }
  if (last) {
    r.sink->Close(absl::OkStatus());
    const std::string id = r.id;
    Erase(id);
    if (observer_) observer_->OnRequestEnded(id, absl::OkStatus());
  }
  return true;
}

std::vector<int64_t> RequestTracker::Apply(const std::vector<SeqEvent>& events) {
  std::vector<int64_t> to_end;
  for (const SeqEvent& e : events) {
    auto where = by_seq_.find(e.seq);
    if (where == by_seq_.end()) continue;
    const std::string request_id = where->second.first;
    Request& r = requests_.at(request_id);
    Sequence& q = r.seqs[where->second.second];
    if (q.finished) continue;
    if (e.token) {
      ++q.num_output;
      q.cached_prompt_tokens = e.cached_prompt_tokens;
      if (observer_) observer_->OnOutputToken(request_id, q.index);
      SequenceUpdate u;
      u.index = q.index;
      u.token_ids.push_back(e.token->token);
      if (r.output_logprobs) u.logprobs.push_back(e.token->logprob);
      if (r.top_logprobs > 0) u.top.push_back(e.token->top);
      u.text = q.stops->Add(Text(q, e.token->token));
      if (q.stops->matched()) {
        // A stop string ends the sequence here; the core must stop it too.
        FinishInfo f;
        f.reason = SeqFinishReason::kStop;
        f.num_output_tokens = q.num_output;
        f.stop_string = *q.stops->matched();
        u.finish = f;
        q.finished = true;
        ++r.num_finished;
        by_seq_.erase(q.seq);
        to_end.push_back(q.seq);
        if (observer_) observer_->OnSequenceFinished(request_id, q.index, SeqFinishReason::kStop);
      }
      if (!Emit(r, std::move(u), &to_end)) continue;
    }
    if (e.finish) {
      if (!e.finish->status.ok()) {
        auto ended = End(request_id, e.finish->status);
        to_end.insert(to_end.end(), ended.begin(), ended.end());
        continue;
      }
      auto it = requests_.find(request_id);
      if (it == requests_.end()) continue;
      Request& r2 = it->second;
      Sequence& q2 = r2.seqs[where->second.second];
      if (q2.finished) continue;
      SequenceUpdate u;
      u.index = q2.index;
      u.text = FinalText(q2);
      FinishInfo f;
      f.reason = e.finish->reason;
      f.num_output_tokens = q2.num_output;
      if (q2.stops->matched()) {
        f.reason = SeqFinishReason::kStop;
        f.stop_string = *q2.stops->matched();
      } else if (e.finish->stop_token) {
        if (e.finish->stop_token_is_eos) {
          f.eos_token_id = *e.finish->stop_token;
        } else {
          f.stop_token_id = *e.finish->stop_token;
        }
      }
      u.finish = f;
      q2.finished = true;
      ++r2.num_finished;
      by_seq_.erase(q2.seq);
      if (observer_) observer_->OnSequenceFinished(request_id, q2.index, f.reason);
      Emit(r2, std::move(u), &to_end);
    }
  }
  return to_end;
}

std::vector<int64_t> RequestTracker::End(const std::string& request_id, const absl::Status& status) {
  std::vector<int64_t> live;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return live;
  for (const Sequence& q : it->second.seqs) {
    if (!q.finished) live.push_back(q.seq);
  }
  it->second.sink->Close(status);
  const std::string id = request_id;  // `request_id` may live in the erased entry
  Erase(id);
  if (observer_) observer_->OnRequestEnded(id, status);
  return live;
}

std::vector<int64_t> RequestTracker::EndAll(const absl::Status& status) {
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::vector<int64_t> live;
  for (const auto& id : ids) {
    auto l = End(id, status);
    live.insert(live.end(), l.begin(), l.end());
  }
  return live;
}

void RequestTracker::Erase(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (const Sequence& q : it->second.seqs) by_seq_.erase(q.seq);
  requests_.erase(it);
}

}  // namespace spar
