// Decode steps captured as CUDA graphs and replayed (the cuda backend's
// RunStep): one launch instead of a few hundred, so a small batch is not
// bound by the host's kernel-launch rate. Which steps may be captured and
// under which key is engine/decode_graph_key.h; this class holds the graphs.
//
// A graph reads its step metadata and stage input from fixed buffers of its
// own (refilled before each replay) and writes its output into memory it
// allocates on every launch (freed automatically at the next one). The cache
// keeps at most max_graphs graphs, least recently used ones go first; a step
// shape whose capture failed is remembered and runs eagerly from then on.
#ifndef SPAR_ENGINE_CUDA_STEP_GRAPHS_H_
#define SPAR_ENGINE_CUDA_STEP_GRAPHS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/device_buffer.h"
#include "engine/decode_graph_key.h"
#include "engine/tensor.h"

namespace spar {

struct DecodeGraph {
  cudaGraphExec_t exec = nullptr;
  DeviceBuffer meta, input;
  Tensor output;  // the captured output tensor: the graph's allocation
  uint64_t last_used = 0;
  ~DecodeGraph() {
    output = Tensor();  // frees the graph's output allocation (stream-ordered)
    if (exec) cudaGraphExecDestroy(exec);
  }
};

class StepGraphCache {
 public:
  // node_priority: the graphs keep their kernel nodes' priorities (those of
  // the streams they were captured on) instead of taking the launch stream's.
  StepGraphCache(cudaStream_t stream, int max_graphs, bool node_priority = false)
      : stream_(stream), max_graphs_(max_graphs), node_priority_(node_priority) {}

  // The graph of `key`, or null.
  DecodeGraph* Find(const DecodeGraphKey& key);
  bool Uncapturable(const DecodeGraphKey& key) const { return uncapturable_.count(key) > 0; }

  // Records a new graph for `key`: `prepare` fills the graph's fixed buffers
  // (step metadata, stage input) before the capture starts, `record` issues
  // the step's ops on the stream while `*capturing` is set and returns the
  // output. Returns null when the ops cannot be captured (an op synchronises
  // or allocates outside the stream): the shape then runs eagerly.
  absl::StatusOr<DecodeGraph*> Capture(const DecodeGraphKey& key,
                                       const std::function<absl::Status(DecodeGraph*)>& prepare,
                                       const std::function<absl::StatusOr<Tensor>()>& record, bool* capturing);

  // Replays `g` on the stream.
  absl::Status Launch(DecodeGraph* g);

  // Drops every graph and every uncapturable mark (a new NCCL communicator:
  // the old graphs would replay the old one's collectives).
  void Clear();

  void CountEagerStep() { stats_.eager_steps += 1; }
  StepGraphStats stats() const;

 private:
  cudaStream_t stream_;
  int max_graphs_;
  bool node_priority_;
  std::map<DecodeGraphKey, std::unique_ptr<DecodeGraph>> graphs_;
  std::set<DecodeGraphKey> uncapturable_;
  uint64_t clock_ = 0;
  StepGraphStats stats_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_STEP_GRAPHS_H_
