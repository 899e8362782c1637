#include "engine/cache_formats.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace spar {

absl::StatusOr<std::optional<LatentFormat>> ParseKvCacheDtype(absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "auto") return std::optional<LatentFormat>();
  if (v == "bf16" || v == "bfloat16") return LatentFormat::kBF16;
  if (v == "fp8" || v == "fp8_ds_mla" || v == "fp8_e4m3") return LatentFormat::kFp8Ds;
  if (v == "fp32" || v == "float32") return LatentFormat::kF32;
  return absl::InvalidArgumentError(absl::StrCat(
      "--kv-cache-dtype must be auto, bf16, fp8 (the 656-byte FP8 latent rows) or fp32 (cpu only), got \"", value,
      "\""));
}

absl::StatusOr<std::optional<IndexerFormat>> ParseIndexerCacheDtype(absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "auto") return std::optional<IndexerFormat>();
  if (v == "fp8" || v == "fp8_e4m3") return IndexerFormat::kFp8;
  if (v == "bf16" || v == "bfloat16") return IndexerFormat::kBF16;
  if (v == "fp32" || v == "float32") return IndexerFormat::kF32;
  return absl::InvalidArgumentError(absl::StrCat(
      "--indexer-cache-dtype must be auto, fp8, bf16 (exact mode) or fp32 (cpu only), got \"", value, "\""));
}

absl::StatusOr<CacheDtypes> ParseCacheDtypes(absl::string_view kv_cache_dtype, absl::string_view indexer_cache_dtype) {
  CacheDtypes d;
  auto latent = ParseKvCacheDtype(kv_cache_dtype);
  if (!latent.ok()) return latent.status();
  auto indexer = ParseIndexerCacheDtype(indexer_cache_dtype);
  if (!indexer.ok()) return indexer.status();
  d.latent = *latent;
  d.indexer = *indexer;
  return d;
}

absl::StatusOr<CacheFormats> ResolveCacheFormats(absl::string_view backend, const CacheDtypes& dtypes) {
  CacheFormats f;
  if (backend == "cpu") {
    f.latent = dtypes.latent.value_or(LatentFormat::kF32);
    f.indexer = dtypes.indexer.value_or(IndexerFormat::kF32);
    return f;
  }
  f.latent = dtypes.latent.value_or(LatentFormat::kBF16);
  f.indexer = dtypes.indexer.value_or(IndexerFormat::kFp8);
  if (f.latent == LatentFormat::kF32 || f.indexer == IndexerFormat::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("the ", backend, " backend has no fp32 cache kernels: ",
                                                   "--kv-cache-dtype takes auto, bf16 or fp8 and ",
                                                   "--indexer-cache-dtype auto, fp8 or bf16 there"));
  }
  return f;
}

const char* LatentFormatName(LatentFormat format) {
  switch (format) {
    case LatentFormat::kF32: return "fp32";
    case LatentFormat::kBF16: return "bf16";
    case LatentFormat::kFp8Ds: return "fp8";
  }
  return "unknown";
}

const char* IndexerFormatName(IndexerFormat format) {
  switch (format) {
    case IndexerFormat::kF32: return "fp32";
    case IndexerFormat::kBF16: return "bf16";
    case IndexerFormat::kFp8: return "fp8";
  }
  return "unknown";
}

std::string DescribeCacheFormats(const CacheFormats& f) {
  return absl::StrCat("latent ", LatentFormatName(f.latent), ", indexer ", IndexerFormatName(f.indexer));
}

}  // namespace spar
