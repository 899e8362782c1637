#include "base/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace spar {
namespace {

thread_local bool t_in_pool_task = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this] { Loop(); });
    }
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int size() const { return static_cast<int>(workers_.size()); }

  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    t_in_pool_task = true;
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (stop_ && tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

int ConfiguredThreads() {
  if (const char* env = std::getenv("SPAR_NUM_THREADS")) {
    int v = std::atoi(env);
    if (v > 0) return v;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& Pool() {
  // Worker threads besides the caller, which also runs chunks.
  static ThreadPool* pool = new ThreadPool(std::max(0, ConfiguredThreads() - 1));
  return *pool;
}

}  // namespace

int NumWorkerThreads() { return Pool().size() + 1; }

void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int64_t chunks = std::min<int64_t>(max_chunks, NumWorkerThreads());
  if (chunks <= 1 || t_in_pool_task) {
    fn(0, n);
    return;
  }
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int64_t remaining;
  };
  auto shared = std::make_shared<Shared>();
  shared->remaining = chunks - 1;
  const int64_t per = (n + chunks - 1) / chunks;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t b = c * per, e = std::min(n, b + per);
    Pool().Submit([shared, &fn, b, e] {
      if (b < e) fn(b, e);
      std::lock_guard<std::mutex> lock(shared->mu);
      if (--shared->remaining == 0) shared->cv.notify_one();
    });
  }
  const bool was_in_task = t_in_pool_task;
  t_in_pool_task = true;  // chunks run by the caller must not fan out again
  fn(0, std::min(n, per));
  t_in_pool_task = was_in_task;
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait(lock, [&] { return shared->remaining == 0; });
}

}  // namespace spar
