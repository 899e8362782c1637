#include "services/scheduler/block_hash.h"

#include <openssl/sha.h>

#include <string>
#include <vector>

namespace spar {

BlockHash RootBlockHash(absl::string_view salt) {
  const std::string message = std::string("spar prefix cache v1\n") + std::string(salt);
  BlockHash h;
  SHA256(reinterpret_cast<const unsigned char*>(message.data()), message.size(), h.bytes.data());
  return h;
}

BlockHash ChainBlockHash(const BlockHash& parent, absl::Span<const int32_t> tokens) {
  // parent ‖ the ids little-endian, so a key means the same on every host.
  std::vector<uint8_t> message(parent.bytes.begin(), parent.bytes.end());
  message.reserve(parent.bytes.size() + 4 * tokens.size());
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int shift = 0; shift < 32; shift += 8) message.push_back(static_cast<uint8_t>(u >> shift));
  }
  BlockHash h;
  SHA256(message.data(), message.size(), h.bytes.data());
  return h;
}

}  // namespace spar
