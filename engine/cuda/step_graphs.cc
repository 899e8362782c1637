#include "engine/cuda/step_graphs.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

DecodeGraph* StepGraphCache::Find(const DecodeGraphKey& key) {
  auto it = graphs_.find(key);
  return it == graphs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<DecodeGraph*> StepGraphCache::Capture(const DecodeGraphKey& key,
                                                     const std::function<absl::Status(DecodeGraph*)>& prepare,
                                                     const std::function<absl::StatusOr<Tensor>()>& record,
                                                     bool* capturing) {
  if (static_cast<int>(graphs_.size()) >= std::max(1, max_graphs_)) {
    auto lru = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->second->last_used < lru->second->last_used) lru = it;
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // no launch of it in flight
    graphs_.erase(lru);
  }
  auto g = std::make_unique<DecodeGraph>();
  SPAR_RETURN_IF_ERROR(prepare(g.get()));
  cudaGraph_t graph = nullptr;
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  *capturing = true;
  absl::StatusOr<Tensor> out = record();
  *capturing = false;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  cudaError_t inst = cudaErrorUnknown;
  if (out.ok() && end == cudaSuccess) {
    // With node priorities the kernels keep the priority of the stream they
    // were captured on (the urgent branch's); without, the launch stream's.
    inst = cudaGraphInstantiateWithFlags(
        &g->exec, graph,
        cudaGraphInstantiateFlagAutoFreeOnLaunch | (node_priority_ ? cudaGraphInstantiateFlagUseNodePriority : 0));
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!out.ok() || end != cudaSuccess || inst != cudaSuccess) {
    const std::string why =
        !out.ok() ? std::string(out.status().message()) : cudaGetErrorString(end != cudaSuccess ? end : inst);
    g->exec = nullptr;
    out = Tensor();      // a failed capture's tensors were never allocated
    cudaGetLastError();  // capture errors are not sticky; clear the last one
    uncapturable_.insert(key);
    stats_.capture_failures += 1;
    std::fprintf(stderr, "cuda backend: decode step (%s) not captured as a graph, runs eagerly: %s\n",
                 key.DebugString().c_str(), why.c_str());
    return static_cast<DecodeGraph*>(nullptr);
  }
  g->output = *std::move(out);
  stats_.captures += 1;
  DecodeGraph* raw = g.get();
  graphs_[key] = std::move(g);
  return raw;
}

absl::Status StepGraphCache::Launch(DecodeGraph* g) {
  g->last_used = ++clock_;
  SPAR_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(g->exec, stream_));
  stats_.replays += 1;
  return absl::OkStatus();
}

void StepGraphCache::Clear() {
  graphs_.clear();
  uncapturable_.clear();
}

StepGraphStats StepGraphCache::stats() const {
  StepGraphStats s = stats_;
  s.graphs = static_cast<int64_t>(graphs_.size());
  return s;
}

}  // namespace spar
