#include "services/http/body_decoder.h"

#include <zlib.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace spar::http {

// One zlib inflate stream (gzip members one after another, or one zlib or
// raw deflate stream).
class BodyDecoder::Inflater {
 public:
  explicit Inflater(bool gzip) : gzip_(gzip) {}
  ~Inflater() {
    if (initialized_) inflateEnd(&z_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Inflates `n` bytes, handing each piece of output to `out`, which may
  // stop the stream by returning an error.
  template <typename Out>
  absl::Status Feed(const char* data, size_t n, Out&& out) {
    if (n == 0) return absl::OkStatus();
    if (!initialized_) {
      if (absl::Status s = Init(data, n); !s.ok()) return s;
      if (!initialized_) return absl::OkStatus();  // waiting for the header's second byte
      if (!header_.empty()) {
        // The first byte came alone: feed it now, then the rest.
        const std::string first = std::move(header_);
        header_.clear();
        if (absl::Status s = Inflate(first.data(), first.size(), out); !s.ok()) return s;
      }
    }
    return Inflate(data, n, out);
  }

  // The input ended: every stream that began has ended too.
  absl::Status Finish() const {
    if (!initialized_ && header_.empty()) return absl::OkStatus();  // nothing was sent
    if (!ended_) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", gzip_ ? "gzip" : "deflate", " request body ends before its compressed data does"));
    }
    return absl::OkStatus();
  }

 private:
  // A deflate body is zlib-wrapped (RFC 9110) unless its first two bytes
  // are not a zlib header: then it is a raw deflate stream.
  absl::Status Init(const char*& data, size_t& n) {
    int window_bits = gzip_ ? 16 + MAX_WBITS : MAX_WBITS;
    if (!gzip_) {
      if (header_.empty() && n < 2) {
        header_.assign(data, n);  // decide with the next byte
        n = 0;
        return absl::OkStatus();
      }
      const unsigned char cmf = static_cast<unsigned char>(header_.empty() ? data[0] : header_[0]);
      const unsigned char flg = static_cast<unsigned char>(header_.empty() ? data[1] : data[0]);
      const bool zlib_header = (cmf & 0x0f) == Z_DEFLATED && (cmf * 256 + flg) % 31 == 0;
      if (!zlib_header) window_bits = -MAX_WBITS;
    }
    if (inflateInit2(&z_, window_bits) != Z_OK) return absl::ResourceExhaustedError("zlib could not start");
    initialized_ = true;
    return absl::OkStatus();
  }

  template <typename Out>
  absl::Status Inflate(const char* data, size_t n, Out& out) {
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z_.avail_in = static_cast<uInt>(n);
    char buf[64 << 10];
    bool more_output = false;  // the last call filled `buf`: zlib may hold more
    while (z_.avail_in > 0 || more_output) {
      if (ended_) {
        if (z_.avail_in == 0) break;
        // Only gzip may go on: another member.
        if (!gzip_) return absl::InvalidArgumentError("the deflate request body has data after its end");
        if (inflateReset(&z_) != Z_OK) return absl::InternalError("zlib could not reset");
        ended_ = false;
      }
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof(buf);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t produced = sizeof(buf) - z_.avail_out;
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        return absl::InvalidArgumentError(absl::StrCat("the ", gzip_ ? "gzip" : "deflate",
                                                       " request body is not valid compressed data (",
                                                       z_.msg != nullptr ? z_.msg : "corrupt", ")"));
      }
      if (produced > 0) {
        if (absl::Status s = out(buf, produced); !s.ok()) return s;
      }
      more_output = z_.avail_out == 0;
      if (rc == Z_STREAM_END) {
        ended_ = true;  // all of this stream's output is out
        more_output = false;
      }
      if (rc == Z_BUF_ERROR) break;  // no progress possible without more input
    }
    return absl::OkStatus();
  }

  const bool gzip_;
  z_stream z_{};
  bool initialized_ = false;
  bool ended_ = false;
  std::string header_;  // deflate: a first byte that came alone
};

absl::StatusOr<std::unique_ptr<BodyDecoder>> BodyDecoder::ForEncoding(absl::string_view content_encoding,
                                                                      BodyLimits limits) {
  const std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(content_encoding));
  Coding c;
  if (coding.empty() || coding == "identity") {
    c = Coding::kIdentity;
  } else if (coding == "gzip" || coding == "x-gzip") {
    c = Coding::kGzip;
  } else if (coding == "deflate") {
    c = Coding::kDeflate;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("Content-Encoding \"", content_encoding, "\" is not supported (use gzip, deflate or none)"));
  }
  return std::unique_ptr<BodyDecoder>(new BodyDecoder(c, limits));
}

BodyDecoder::BodyDecoder(Coding coding, BodyLimits limits) : coding_(coding), limits_(limits) {
  if (coding_ != Coding::kIdentity) inflater_ = std::make_unique<Inflater>(coding_ == Coding::kGzip);
}

BodyDecoder::~BodyDecoder() = default;

absl::Status BodyDecoder::TooLarge() const {
  return absl::ResourceExhaustedError(
      absl::StrCat("the request body exceeds the server's limit of ", limits_.max_decoded_bytes, " bytes",
                   coding_ == Coding::kIdentity ? "" : " once decompressed", " (--max-body-bytes)"));
}

absl::Status BodyDecoder::Append(const char* data, size_t n) {
  const size_t needed = body_.size() + n;
  if (needed > limits_.max_decoded_bytes) return TooLarge();
  if (needed > body_.capacity()) {
    // Grow as std::string would, but never past the limit (reserve itself
    // may double past it: a fresh string gets exactly what it reserves).
    std::string grown;
    grown.reserve(std::min(limits_.max_decoded_bytes, std::max({needed, 2 * body_.capacity(), size_t{4096}})));
    grown.append(body_);
    body_.swap(grown);
  }
  body_.append(data, n);
  if (coding_ != Coding::kIdentity && body_.size() > limits_.ratio_floor_bytes &&
      static_cast<double>(body_.size()) > limits_.max_ratio * static_cast<double>(wire_bytes_)) {
    return absl::ResourceExhaustedError(absl::StrCat("the compressed request body expands more than ",
                                                     limits_.max_ratio, " times (a decompression bomb?)"));
  }
  return absl::OkStatus();
}

absl::Status BodyDecoder::Feed(const char* data, size_t n) {
  wire_bytes_ += n;
  if (coding_ == Coding::kIdentity) return Append(data, n);
  return inflater_->Feed(data, n, [this](const char* out, size_t m) { return Append(out, m); });
}

absl::Status BodyDecoder::Finish() {
  if (inflater_ != nullptr) return inflater_->Finish();
  return absl::OkStatus();
}

}  // namespace spar::http
