#include "engine/checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A shard name from an index must stay inside the checkpoint directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

}  // namespace

int LayerOfTensor(const std::string& name) {
  constexpr absl::string_view kPrefix = "model.layers.";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  size_t end = name.find('.', kPrefix.size());
  if (end == std::string::npos) return -1;
  int layer = -1;
  if (!absl::SimpleAtoi(absl::string_view(name).substr(kPrefix.size(), end - kPrefix.size()), &layer)) return -1;
  return layer;
}

TensorFilter LayerRangeFilter(int first_layer, int last_layer, bool embedding, bool head) {
  return [=](const std::string& name) {
    const int layer = LayerOfTensor(name);
    if (layer >= 0) return layer >= first_layer && layer < last_layer;
    if (absl::StartsWith(name, "model.embed_tokens.")) return embedding;
    if (name == "model.norm.weight" || absl::StartsWith(name, "lm_head.")) return head;
    return false;
  };
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir, TensorFilter filter) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  const std::string single_path = absl::StrCat(dir, "/", kSingleFile);
  if (FileExists(index_path)) {
    SPAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](absl::string_view what) { return absl::DataLossError(absl::StrCat(index_path, ": ", what)); };
    if (index.is_discarded()) return bad("not valid JSON");
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return bad("missing object weight_map");
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return bad(absl::StrCat("weight_map entry \"", it.key(), "\" is not a file name"));
      const std::string shard = it.value().get<std::string>();
      if (!IsPlainFileName(shard)) return bad(absl::StrCat("shard name \"", shard, "\" is not a plain file name"));
      if (filter && !filter(it.key())) continue;
      ckpt->location_[it.key()] = shard;
    }
  } else if (FileExists(single_path)) {
    SPAR_ASSIGN_OR_RETURN(const SafetensorsFile* file, ckpt->File(kSingleFile));
    for (const std::string& name : file->Names()) {
      if (filter && !filter(name)) continue;
      ckpt->location_[name] = kSingleFile;
    }
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": neither ", kIndexFile, " nor ", kSingleFile, " found"));
  }
  // Open every shard that holds a wanted tensor now, so a missing or corrupt
  // shard fails at load rather than mid-run, and check that the index told
  // the truth.
  for (const auto& [name, shard] : ckpt->location_) {
    SPAR_ASSIGN_OR_RETURN(const SafetensorsFile* file, ckpt->File(shard));
    if (!file->Has(name)) {
      return absl::DataLossError(absl::StrCat(file->path(), ": index lists tensor \"", name, "\" but the file lacks it"));
    }
  }
  return ckpt;
}

absl::StatusOr<const SafetensorsFile*> Checkpoint::File(const std::string& shard) const {
  auto it = files_.find(shard);
  if (it != files_.end()) return it->second.get();
  SPAR_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(absl::StrCat(dir_, "/", shard)));
  const SafetensorsFile* ptr = file.get();
  files_[shard] = std::move(file);
  return ptr;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : location_) names.push_back(name);
  return names;
}

absl::StatusOr<TensorView> Checkpoint::Get(const std::string& name) const {
  auto it = location_.find(name);
  if (it == location_.end()) return absl::NotFoundError(absl::StrCat(dir_, ": checkpoint has no tensor \"", name, "\""));
  SPAR_ASSIGN_OR_RETURN(const SafetensorsFile* file, File(it->second));
  return file->Get(name);
}

absl::StatusOr<TensorView> Checkpoint::GetChecked(const std::string& name, DType dtype,
                                                  const std::vector<int64_t>& shape) const {
  SPAR_ASSIGN_OR_RETURN(TensorView view, Get(name));
  if (view.dtype != dtype || view.shape != shape) {
    TensorView want;
    want.shape = shape;
    return absl::InvalidArgumentError(absl::StrCat(dir_, "/", location_.at(name), ": tensor \"", name, "\" is ",
                                                   DTypeName(view.dtype), view.ShapeString(), ", expected ",
                                                   DTypeName(dtype), want.ShapeString()));
  }
  return view;
}

absl::Status CheckpointWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                   SafetensorsWriter::Filler fill) {
  if (entries_.count(name)) return absl::AlreadyExistsError(absl::StrCat("tensor \"", name, "\" added twice"));
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": negative dimension"));
    n *= static_cast<uint64_t>(d);
  }
  entries_[name] = Entry{dtype, std::move(shape), n, std::move(fill)};
  return absl::OkStatus();
}

absl::Status CheckpointWriter::AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                        std::string bytes) {
  auto shared = std::make_shared<std::string>(std::move(bytes));
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  if (n != shared->size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", shared->size(),
                                                   " bytes do not match its shape and dtype"));
  }
  return Add(name, dtype, std::move(shape), [shared](uint8_t* dst, size_t len) { std::memcpy(dst, shared->data(), len); });
}

absl::Status CheckpointWriter::Write(const std::string& dir, uint64_t max_shard_bytes) const {
  // Greedy split in name order, so each layer's tensors stay together.
  std::vector<std::vector<const std::pair<const std::string, Entry>*>> shards(1);
  uint64_t current = 0, total = 0;
  for (const auto& kv : entries_) {
    if (max_shard_bytes > 0 && current > 0 && current + kv.second.nbytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&kv);
    current += kv.second.nbytes;
    total += kv.second.nbytes;
  }
  if (shards.size() == 1) {
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (const auto* kv : shards[0]) {
      SPAR_RETURN_IF_ERROR(writer.Add(kv->first, kv->second.dtype, kv->second.shape, kv->second.fill));
    }
    return writer.Write(absl::StrCat(dir, "/", kSingleFile));
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string shard = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (const auto* kv : shards[i]) {
      SPAR_RETURN_IF_ERROR(writer.Add(kv->first, kv->second.dtype, kv->second.shape, kv->second.fill));
      weight_map[kv->first] = shard;
    }
    SPAR_RETURN_IF_ERROR(writer.Write(absl::StrCat(dir, "/", shard)));
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteStringToFile(absl::StrCat(dir, "/", kIndexFile), index.dump(2) + "\n");
}

}  // namespace spar
