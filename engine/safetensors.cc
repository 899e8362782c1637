#include "engine/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

// numel * elem_size without overflow; false when it would overflow.
bool CheckedByteSize(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* out) {
  unsigned __int128 total = elem_size;
  for (int64_t d : shape) {
    total *= static_cast<uint64_t>(d);
    if (total > (static_cast<unsigned __int128>(1) << 62)) return false;
  }
  *out = static_cast<uint64_t>(total);
  return true;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  SPAR_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = path;
  file->mapped_ = std::move(mapped);
  SPAR_RETURN_IF_ERROR(file->Parse(file->mapped_->data(), file->mapped_->size()));
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(std::string bytes, std::string label) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = std::move(label);
  file->owned_ = std::move(bytes);
  SPAR_RETURN_IF_ERROR(file->Parse(reinterpret_cast<const uint8_t*>(file->owned_.data()), file->owned_.size()));
  return file;
}

absl::Status SafetensorsFile::Parse(const uint8_t* data, size_t size) {
  auto error = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(label_, ": ", what));
  };
  if (size < 8) return error(absl::StrCat("truncated: ", size, " bytes, less than the 8-byte header length"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes) {
    return error(absl::StrCat("header length ", header_len, " exceeds the ", kMaxHeaderBytes, "-byte limit"));
  }
  if (header_len > size - 8) {
    return error(absl::StrCat("header length ", header_len, " runs past the end of the file (", size, " bytes)"));
  }
  const char* header_begin = reinterpret_cast<const char*>(data + 8);
  json header = json::parse(header_begin, header_begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return error("header is not valid JSON");
  if (!header.is_object()) return error("header must be a JSON object");
  const uint8_t* section = data + 8 + header_len;
  const uint64_t section_size = size - 8 - header_len;

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return error("__metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) return error(absl::StrCat("__metadata__ value for \"", m.key(), "\" is not a string"));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto terr = [&](absl::string_view what) { return error(absl::StrCat("tensor \"", name, "\": ", what)); };
    if (!entry.is_object()) return terr("entry must be an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) return terr("missing string field dtype");
    auto dtype = ParseDType(entry["dtype"].get<std::string>());
    if (!dtype.ok()) return terr(dtype.status().message());
    if (!entry.contains("shape") || !entry["shape"].is_array()) return terr("missing list field shape");
    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 62)) {
        return terr(absl::StrCat("shape entry ", d.dump(), " is not a non-negative integer in range"));
      }
      view.shape.push_back(d.get<int64_t>());
    }
    const json* offsets = entry.contains("data_offsets") ? &entry["data_offsets"] : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return terr("data_offsets must be two non-negative integers");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) return terr(absl::StrCat("data_offsets [", begin, ", ", end, "] are reversed"));
    if (end > section_size) {
      return terr(absl::StrCat("data_offsets end ", end, " is beyond the data section (", section_size, " bytes)"));
    }
    uint64_t expected = 0;
    if (!CheckedByteSize(view.shape, DTypeSize(view.dtype), &expected)) return terr("shape overflows");
    if (expected != end - begin) {
      return terr(absl::StrCat("shape ", view.ShapeString(), " of ", DTypeName(view.dtype), " needs ", expected,
                               " bytes but data_offsets span ", end - begin));
    }
    view.data = section + begin;
    view.nbytes = end - begin;
    auto [pos, inserted] = tensors_.emplace(name, std::move(view));
    spans.push_back({begin, end, &pos->first});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return error(absl::StrCat("tensors \"", *spans[i - 1].name, "\" and \"", *spans[i].name, "\" overlap"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

absl::StatusOr<TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat(label_, ": no tensor \"", name, "\""));
  return it->second;
}

absl::Status SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape, Filler fill) {
  if (name.empty() || name == "__metadata__") return absl::InvalidArgumentError(absl::StrCat("bad tensor name \"", name, "\""));
  if (entries_.count(name)) return absl::AlreadyExistsError(absl::StrCat("tensor \"", name, "\" added twice"));
  uint64_t nbytes = 0;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": negative dimension"));
  }
  if (!CheckedByteSize(shape, DTypeSize(dtype), &nbytes)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": shape overflows"));
  }
  entries_[name] = Entry{dtype, std::move(shape), static_cast<size_t>(nbytes), std::move(fill)};
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                         std::string bytes) {
  uint64_t nbytes = 0;
  if (!CheckedByteSize(shape, DTypeSize(dtype), &nbytes) || nbytes != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", bytes.size(),
                                                   " bytes do not match its shape and dtype"));
  }
  auto shared = std::make_shared<std::string>(std::move(bytes));
  return Add(name, dtype, std::move(shape), [shared](uint8_t* dst, size_t n) { std::memcpy(dst, shared->data(), n); });
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, e] : entries_) total += e.nbytes;
  return total;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    header[name] = {{"dtype", std::string(DTypeName(e.dtype))}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint8_t> buf;
  for (const auto& [name, e] : entries_) {
    buf.assign(e.nbytes, 0);
    if (e.nbytes > 0) e.fill(buf.data(), e.nbytes);
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace spar
