// Streaming detokenization: ids arrive one at a time, text leaves as deltas.
//
// Guarantees, for any id sequence:
//   * a delta never ends inside a UTF-8 character (bytes of a character that
//     is still incomplete are held back, including runs of <0xNN>
//     byte-fallback tokens, which Hugging Face decodes as a whole run);
//   * the concatenation of all deltas plus Finish() equals
//     Tokenizer::Decode(ids, skip_special).
#ifndef SPAR_TEXT_DETOKENIZER_H_
#define SPAR_TEXT_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace spar {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special);

  // The text that became final with `id` (often empty while a multi-byte
  // character is still arriving). An out-of-range id is an error and leaves
  // the state unchanged.
  absl::StatusOr<std::string> Add(int32_t id);

  // End of stream: held bytes that never completed a character become
  // U+FFFD, exactly as Decode treats them. The detokenizer can be reused
  // afterwards for a new stream.
  std::string Finish();

  // Bytes currently held back (for tests and metrics).
  size_t pending_bytes() const { return pending_.size() + fallback_.size(); }

 private:
  void AppendChunkText(absl::string_view text, std::string* out);
  void FlushFallback(std::string* out);

  const Tokenizer* tokenizer_;
  bool skip_special_;
  int strip_budget_;       // leading spaces still to drop in this chunk
  std::string pending_;    // byte-level: an incomplete UTF-8 tail
  std::string fallback_;   // a run of <0xNN> bytes not yet terminated
};

}  // namespace spar

#endif  // SPAR_TEXT_DETOKENIZER_H_
