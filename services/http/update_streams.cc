#include "services/http/update_streams.h"

namespace spar::http {

class UpdateStreams::SourceSink : public GenerationSink {
 public:
  SourceSink(std::shared_ptr<UpdateStreams> streams, int source) : streams_(std::move(streams)), source_(source) {}
  bool Send(GenerationUpdate update) override {
    Event e;
    e.source = source_;
    e.update = std::move(update);
    return streams_->Push(std::move(e));
  }
  void Close(const absl::Status& status) override {
    Event e;
    e.source = source_;
    e.closed = status;
    streams_->Push(std::move(e));
  }

 private:
  std::shared_ptr<UpdateStreams> streams_;
  int source_;
};

std::shared_ptr<UpdateStreams> UpdateStreams::Create(int sources, std::function<void()> on_ready) {
  return std::shared_ptr<UpdateStreams>(new UpdateStreams(sources, std::move(on_ready)));
}

std::shared_ptr<GenerationSink> UpdateStreams::Sink(int i) {
  return std::make_shared<SourceSink>(shared_from_this(), i);
}

bool UpdateStreams::Push(Event event) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abandoned_ && event.update) return false;
    queue_.push_back(std::move(event));
    notify = !notified_;
    notified_ = true;
  }
  if (notify && on_ready_) on_ready_();
  return true;
}

std::vector<UpdateStreams::Event> UpdateStreams::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  notified_ = false;
  for (const Event& e : out) {
    if (e.closed) open_[e.source] = false;
  }
  return out;
}

bool UpdateStreams::Done() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) return false;
  for (bool open : open_) {
    if (open) return false;
  }
  return true;
}

void UpdateStreams::Forget(int i) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[i] = false;
}

void UpdateStreams::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_ = true;
}

}  // namespace spar::http
