// The byte-level BPE tokenizer that make-tiny ships with its models: the 256
// GPT-2 byte symbols, a few dozen English merges and GLM-style special tokens,
// written as a Hugging Face tokenizer.json.
#ifndef SPAR_ENGINE_TINY_TOKENIZER_H_
#define SPAR_ENGINE_TINY_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace spar {

struct TinyTokenizerSpec {
  std::vector<std::string> specials;  // in id order after bytes and merges
  int64_t first_special_id = 0;
  int64_t num_tokens = 0;
  int64_t eos_id = 0;        // <|endoftext|>
  int64_t user_id = 0;       // <|user|> (ends an assistant turn)
  int64_t observation_id = 0;
};

TinyTokenizerSpec TinyTokenizerLayout();
std::string TinyTokenizerJson();
std::string TinyTokenizerConfigJson();

}  // namespace spar

#endif  // SPAR_ENGINE_TINY_TOKENIZER_H_
