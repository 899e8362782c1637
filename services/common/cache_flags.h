// The cache flags, spelled as vLLM spells them, for every command that
// takes them (spar generate, spar-worker, spar cluster, spar plan; the
// prefix-caching pair on spar-scheduler and spar cluster). With a daemon's
// "SPAR_" prefix each has its environment twin (SPAR_KV_CACHE_DTYPE, ...).
//   --kv-cache-dtype auto|bf16|fp8|fp32, --indexer-cache-dtype auto|fp8|bf16|fp32
//     (engine/cache_formats.h: what each means, and auto per backend)
//   --enable-prefix-caching (default) / --no-enable-prefix-caching
#ifndef SPAR_SERVICES_COMMON_CACHE_FLAGS_H_
#define SPAR_SERVICES_COMMON_CACHE_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cache_formats.h"
#include "services/common/args.h"

namespace spar {

struct CacheDtypeFlags {
  std::string kv_cache_dtype = "auto";
  std::string indexer_cache_dtype = "auto";

  void Register(ArgParser* args);
  // INVALID_ARGUMENT naming the flag for a value it does not take.
  absl::StatusOr<CacheDtypes> Parse() const;
  // Parse(), resolved for `backend`: also refuses what that backend cannot
  // store (fp32 on cuda).
  absl::StatusOr<CacheFormats> Resolve(absl::string_view backend) const;
  // The flags as given, for a command that starts daemons (spar cluster).
  std::vector<std::string> PassThrough() const;
};

struct PrefixCachingFlags {
  bool enable = true;
  bool disable = false;

  void Register(ArgParser* args);
  // --no-enable-prefix-caching wins (also over SPAR_ENABLE_PREFIX_CACHING).
  bool enabled() const { return enable && !disable; }
  std::vector<std::string> PassThrough() const;
};

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_CACHE_FLAGS_H_
