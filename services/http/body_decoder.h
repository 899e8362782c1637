// A request body as it arrives, decoded piece by piece and limited after
// decoding: `Content-Encoding: gzip` / `deflate` are inflated incrementally
// with zlib (Debian zlib1g-dev), so a small compressed body that would
// unpack to gigabytes (a decompression bomb) is refused as soon as its
// decoded size passes the limit, never held in memory beyond it.
//
//   identity        the bytes as they are
//   gzip, x-gzip    RFC 1952, several members one after another allowed
//   deflate         RFC 1950 (zlib); a raw RFC 1951 stream too, which some
//                   clients send under that name (as browsers accept it)
// Anything else (br, zstd, a list of codings) is UNIMPLEMENTED: the server
// answers 415.
//
// Limits: the decoded body may hold at most `max_decoded_bytes`; and past
// `ratio_floor_bytes` of output, at most `max_ratio` decoded bytes per
// input byte (a bomb is refused early, before its output is even at the
// size limit). Either is RESOURCE_EXHAUSTED (413); corrupt compressed
// data is INVALID_ARGUMENT (400). The output string never grows beyond the
// limit (its capacity included).
//
// Thread-compatible.
#ifndef SPAR_SERVICES_HTTP_BODY_DECODER_H_
#define SPAR_SERVICES_HTTP_BODY_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar::http {

struct BodyLimits {
  size_t max_decoded_bytes = 16 << 20;
  double max_ratio = 200;
  size_t ratio_floor_bytes = 1 << 20;
};

class BodyDecoder {
 public:
  // `content_encoding` is the header's value ("" when absent).
  static absl::StatusOr<std::unique_ptr<BodyDecoder>> ForEncoding(absl::string_view content_encoding,
                                                                  BodyLimits limits);
  ~BodyDecoder();
  BodyDecoder(const BodyDecoder&) = delete;
  BodyDecoder& operator=(const BodyDecoder&) = delete;

  // Decodes the next `n` bytes of the body and appends the result.
  absl::Status Feed(const char* data, size_t n);
  // The body has ended: a compressed stream must be complete.
  absl::Status Finish();

  // The decoded body so far (moved out once finished).
  std::string& body() { return body_; }
  uint64_t wire_bytes() const { return wire_bytes_; }

 private:
  enum class Coding { kIdentity, kGzip, kDeflate };
  class Inflater;
  BodyDecoder(Coding coding, BodyLimits limits);
  absl::Status Append(const char* data, size_t n);
  absl::Status TooLarge() const;

  const Coding coding_;
  const BodyLimits limits_;
  std::unique_ptr<Inflater> inflater_;
  std::string body_;
  uint64_t wire_bytes_ = 0;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_BODY_DECODER_H_
