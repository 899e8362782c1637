// Fuzzes the safetensors header parser (engine/safetensors.h) with whole
// file images: checkpoints are downloaded artifacts, and a worker must fail
// with a status, never read outside the file, on any bytes.
//
// Properties: every tensor handed out lies inside the image (all its bytes
// are read, so ASan flags a view that does not), its byte size is its
// shape times its dtype size, and Get() agrees with Names().
#include <cstdint>
#include <string>

#include "engine/safetensors.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = spar::SafetensorsFile::FromBuffer(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  uint64_t checksum = 0;
  for (const std::string& name : (*file)->Names()) {
    SPAR_FUZZ_CHECK((*file)->Has(name));
    auto view = (*file)->Get(name);
    SPAR_FUZZ_CHECK(view.ok());
    SPAR_FUZZ_CHECK(view->name == name);
    // numel() is public API: it must not overflow for any accepted shape.
    const int64_t numel = view->numel();
    SPAR_FUZZ_CHECK(numel >= 0);
    SPAR_FUZZ_CHECK(static_cast<uint64_t>(numel) * spar::DTypeSize(view->dtype) == view->nbytes);
    (void)view->ShapeString();
    for (size_t i = 0; i < view->nbytes; ++i) checksum += view->data[i];
  }
  for (const auto& [key, value] : (*file)->metadata()) checksum += key.size() + value.size();
  SPAR_FUZZ_CHECK((*file)->Get("\x01no such tensor").status().code() == absl::StatusCode::kNotFound ||
                  (*file)->Has("\x01no such tensor"));
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
