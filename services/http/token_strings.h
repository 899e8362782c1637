// How one token id reads in OpenAI logprobs: "token" is the id decoded on
// its own (what Hugging Face's decode([id]) gives, U+FFFD for a piece of a
// multi-byte character, as vLLM reports it) and "bytes" its raw bytes, so a
// client can reassemble characters split over tokens. Without a tokenizer,
// or for ids past it (padded vocabularies), the token is "token_id:<id>"
// (vLLM's spelling) with no bytes.
//
// Thread-safe (the tokenizer is).
#ifndef SPAR_SERVICES_HTTP_TOKEN_STRINGS_H_
#define SPAR_SERVICES_HTTP_TOKEN_STRINGS_H_

#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace spar::http {

class TokenStrings {
 public:
  // `tokenizer` may be null; it must outlive this object.
  explicit TokenStrings(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  std::string Text(int32_t id) const;
  std::string Bytes(int32_t id) const;

 private:
  const Tokenizer* tokenizer_;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_TOKEN_STRINGS_H_
