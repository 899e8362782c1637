// Safetensors files: a memory-mapped reader that validates every header
// field before handing out tensor views, and a streaming writer.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the data section.
#ifndef SPAR_ENGINE_SAFETENSORS_H_
#define SPAR_ENGINE_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "base/mapped_file.h"

namespace spar {

// A tensor's bytes inside a mapped file (valid while the file is open).
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  std::string ShapeString() const;
};

class SafetensorsFile {
 public:
  // Headers above this size are rejected (the format's own limit is 100 MB).
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing). `label` names it in errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string bytes, std::string label);

  const std::string& path() const { return label_; }
  std::vector<std::string> Names() const;
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  absl::Status Parse(const uint8_t* data, size_t size);

  std::string label_;
  std::unique_ptr<MappedFile> mapped_;
  std::string owned_;  // FromBuffer storage
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Streaming writer: tensors are declared first (name, dtype, shape and a
// callback that fills the bytes), then written one by one, so a multi-GB
// checkpoint never sits in memory at once. Output is byte-deterministic:
// tensors are laid out in name order.
class SafetensorsWriter {
 public:
  using Filler = std::function<void(uint8_t* dst, size_t nbytes)>;

  absl::Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape, Filler fill);
  absl::Status AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape, std::string bytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  size_t num_tensors() const { return entries_.size(); }
  uint64_t data_bytes() const;
  absl::Status Write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
    Filler fill;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_SAFETENSORS_H_
