// The content key of a full cache block for prefix caching: a chained
// SHA-256 (OpenSSL, already a dependency for services/security) over the
// block's 64 token ids and the key of the block before it, rooted in a
// salt naming everything else that decides what the cache holds (the model,
// the stages' cache formats). Equal keys mean equal tokens at equal
// positions after an equal prefix, so equal cache contents; 256 bits make
// an accidental collision (a wrong answer served from someone else's
// cache) out of reach, which 64-bit hashes are not at scale. vLLM keys its
// blocks the same way (sha256 of parent hash and token ids).
//
// Pure and thread-compatible.
#ifndef SPAR_SERVICES_SCHEDULER_BLOCK_HASH_H_
#define SPAR_SERVICES_SCHEDULER_BLOCK_HASH_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace spar {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.bytes.data(), sizeof(v));  // already uniformly distributed
    return v;
  }
};

// The root every sequence's chain starts from.
BlockHash RootBlockHash(absl::string_view salt);
// The key of a block holding `tokens` (kCacheBlockTokens ids) after the
// block keyed `parent`.
BlockHash ChainBlockHash(const BlockHash& parent, absl::Span<const int32_t> tokens);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BLOCK_HASH_H_
