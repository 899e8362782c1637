// Which byte formats the paged caches use (base/cache_layout.h): the user's
// choice (--kv-cache-dtype, --indexer-cache-dtype: vLLM's flag names) and
// what "auto" means on each backend. One place, so the engine, the workers,
// `spar plan` and the scheduler's prefix-cache key agree.
//
//   --kv-cache-dtype       auto | bf16 (vLLM: bfloat16) | fp8 (vLLM: fp8_ds_mla, the 656-byte layout) | fp32
//   --indexer-cache-dtype  auto | fp8 | bf16 | fp32
//   auto: the cpu backend keeps its exact fp32 reference caches; the cuda
//   backend (and `spar plan`, which plans GPUs) bf16 latent rows and FP8
//   indexer keys. fp32 is the cpu backend's only (no GPU kernels read it).
// The cpu backend stores and reads every format through kernels/ref's
// codecs, so it reproduces exactly what the cuda backend stores.
#ifndef SPAR_ENGINE_CACHE_FORMATS_H_
#define SPAR_ENGINE_CACHE_FORMATS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/cache_layout.h"

namespace spar {

// What was asked for; nullopt = auto.
struct CacheDtypes {
  std::optional<LatentFormat> latent;
  std::optional<IndexerFormat> indexer;
};

// The formats a backend allocates.
struct CacheFormats {
  LatentFormat latent = LatentFormat::kF32;
  IndexerFormat indexer = IndexerFormat::kF32;
  bool operator==(const CacheFormats&) const = default;
};

// INVALID_ARGUMENT naming the flag and the values it takes.
absl::StatusOr<std::optional<LatentFormat>> ParseKvCacheDtype(absl::string_view value);
absl::StatusOr<std::optional<IndexerFormat>> ParseIndexerCacheDtype(absl::string_view value);
absl::StatusOr<CacheDtypes> ParseCacheDtypes(absl::string_view kv_cache_dtype, absl::string_view indexer_cache_dtype);

// "auto" resolved for `backend`: "cpu" fp32 and fp32; the GPU backends
// ("cuda") bf16 and fp8, and INVALID_ARGUMENT for an fp32 request there.
absl::StatusOr<CacheFormats> ResolveCacheFormats(absl::string_view backend, const CacheDtypes& dtypes);

// The flag values ("fp32", "bf16", "fp8"); ParseKvCacheDtype /
// ParseIndexerCacheDtype read them back.
const char* LatentFormatName(LatentFormat format);
const char* IndexerFormatName(IndexerFormat format);
// "latent bf16, indexer fp8", for logs and `spar plan`.
std::string DescribeCacheFormats(const CacheFormats& formats);

}  // namespace spar

#endif  // SPAR_ENGINE_CACHE_FORMATS_H_
