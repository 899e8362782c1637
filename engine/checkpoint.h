// A Hugging Face checkpoint directory: config.json plus one
// model.safetensors or shards listed in model.safetensors.index.json.
// Shards are memory-mapped lazily, and a filter keeps a worker to the
// tensors of its own layer range.
#ifndef SPAR_ENGINE_CHECKPOINT_H_
#define SPAR_ENGINE_CHECKPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/safetensors.h"

namespace spar {

using TensorFilter = std::function<bool(const std::string& name)>;

// Keeps tensors of layers [first, last) plus, on request, the embedding
// (first stage) and the final norm and lm_head (last stage).
TensorFilter LayerRangeFilter(int first_layer, int last_layer, bool embedding, bool head);

// Extracts N from "model.layers.N.…"; -1 for other names.
int LayerOfTensor(const std::string& name);

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir, TensorFilter filter = nullptr);

  const std::string& dir() const { return dir_; }
  bool Has(const std::string& name) const { return location_.count(name) != 0; }
  // Names visible through the filter, sorted.
  std::vector<std::string> Names() const;
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  // Get plus a dtype and shape check: a known tensor with the wrong layout
  // is an error naming the file and the tensor.
  absl::StatusOr<TensorView> GetChecked(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  size_t num_open_files() const { return files_.size(); }

 private:
  Checkpoint() = default;
  absl::StatusOr<const SafetensorsFile*> File(const std::string& shard) const;

  std::string dir_;
  std::map<std::string, std::string> location_;  // tensor -> shard file name
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// Collects tensors and writes them as model.safetensors, or as shards of at
// most `max_shard_bytes` (Hugging Face naming, model-00001-of-00003.safetensors)
// plus model.safetensors.index.json.
class CheckpointWriter {
 public:
  absl::Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape, SafetensorsWriter::Filler fill);
  absl::Status AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape, std::string bytes);
  absl::Status Write(const std::string& dir, uint64_t max_shard_bytes = 0) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes;
    SafetensorsWriter::Filler fill;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CHECKPOINT_H_
