#include "services/common/cache_flags.h"

namespace spar {

void CacheDtypeFlags::Register(ArgParser* args) {
  args->AddString("kv-cache-dtype", &kv_cache_dtype,
                  "latent (MLA) cache format: auto (cpu: fp32, cuda: bf16), bf16, fp8 (656 B/token), fp32 (cpu)");
  args->AddString("indexer-cache-dtype", &indexer_cache_dtype,
                  "indexer key cache format: auto (cpu: fp32, cuda: fp8), fp8, bf16 (exact mode), fp32 (cpu)");
}

absl::StatusOr<CacheDtypes> CacheDtypeFlags::Parse() const {
  return ParseCacheDtypes(kv_cache_dtype, indexer_cache_dtype);
}

absl::StatusOr<CacheFormats> CacheDtypeFlags::Resolve(absl::string_view backend) const {
  auto dtypes = Parse();
  if (!dtypes.ok()) return dtypes.status();
  return ResolveCacheFormats(backend, *dtypes);
}

std::vector<std::string> CacheDtypeFlags::PassThrough() const {
  return {"--kv-cache-dtype", kv_cache_dtype, "--indexer-cache-dtype", indexer_cache_dtype};
}

void PrefixCachingFlags::Register(ArgParser* args) {
  args->AddBool("enable-prefix-caching", &enable,
                "reuse the KV cache of full 64-token blocks a prompt shares with earlier requests (default on)");
  args->AddBool("no-enable-prefix-caching", &disable, "turn automatic prefix caching off");
}

std::vector<std::string> PrefixCachingFlags::PassThrough() const {
  if (enabled()) return {};
  return {"--no-enable-prefix-caching"};
}

}  // namespace spar
