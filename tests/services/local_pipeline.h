// An in-process Pipeline for scheduler tests: S StageExecutors (the real
// worker stage code, real model) chained on one thread, executing plans in
// order and passing hidden states as the gRPC pipeline does (fp32 rows).
// `Hold()` pauses execution so tests can fill queues deterministically.
#ifndef SPAR_TESTS_SERVICES_LOCAL_PIPELINE_H_
#define SPAR_TESTS_SERVICES_LOCAL_PIPELINE_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/scheduler/pipeline.h"
#include "services/worker/stage_executor.h"

namespace spar::testing {

class LocalPipeline : public Pipeline {
 public:
  // Loads `stages` stages of `model_dir` with `num_blocks` blocks each.
  // `num_speculative_tokens` > 0: the last stage loads the MTP layer.
  static absl::StatusOr<std::unique_ptr<LocalPipeline>> Create(const std::string& model_dir, int stages,
                                                               int64_t num_blocks, int num_speculative_tokens = 0) {
    auto config = LoadModelConfig(model_dir + "/config.json");
    if (!config.ok()) return config.status();
    auto split = SplitLayers(*config, stages);
    if (!split.ok()) return split.status();
    auto p = std::unique_ptr<LocalPipeline>(new LocalPipeline());
    p->info_.num_stages = stages;
    p->info_.num_blocks = num_blocks;
    p->info_.stage_layers = *split;
    for (const LayerRange& r : *split) {
      StageOptions o;
      o.model_dir = model_dir;
      o.first_layer = r.first;
      o.last_layer = r.last;
      o.num_blocks = num_blocks;
      o.num_speculative_tokens = num_speculative_tokens;
      auto exec = StageExecutor::Load(o);
      if (!exec.ok()) return exec.status();
      p->info_.cache_dtypes.push_back(absl::StrCat(LatentFormatName((*exec)->cache_formats().latent), "/",
                                                   IndexerFormatName((*exec)->cache_formats().indexer)));
      p->stages_.push_back(std::move(*exec));
    }
    p->info_.num_speculative_tokens = p->stages_.back()->num_speculative_tokens();
    return p;
  }
  ~LocalPipeline() override { Close(); }

  absl::StatusOr<PipelineInfo> Connect(Callbacks callbacks, absl::Duration) override {
    Close();
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_ = std::move(callbacks);
    closing_ = false;
    for (auto& s : stages_) s->ResetSequences();
    thread_ = std::thread([this] { Run(); });
    return info_;
  }
  void Send(MicroBatchPlan plan) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(plan));
    }
    cv_.notify_all();
  }
  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    queue_.clear();
  }
  void Hold(bool hold) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = hold;
    }
    cv_.notify_all();
  }
  size_t sampling_states() const { return stages_.back()->num_sampling_states(); }

 private:
  LocalPipeline() = default;
  void Run() {
    for (;;) {
      MicroBatchPlan plan;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || (!hold_ && !queue_.empty()); });
        if (closing_) return;
        plan = std::move(queue_.front());
        queue_.pop_front();
      }
      MicroBatchResult result;
      result.id = plan.id;
      Activations hidden;
      for (auto& stage : stages_) {
        auto out = stage->Execute(plan, std::move(hidden));
        if (!out.ok()) {
          result.status = out.status();
          break;
        }
        hidden = std::move(out->hidden);
        result.tokens = std::move(out->tokens);
        result.speculation = std::move(out->speculation);
      }
      callbacks_.on_result(std::move(result));
    }
  }

  PipelineInfo info_;
  std::vector<std::unique_ptr<StageExecutor>> stages_;
  Callbacks callbacks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MicroBatchPlan> queue_;
  bool closing_ = false, hold_ = false;
  std::thread thread_;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_LOCAL_PIPELINE_H_
