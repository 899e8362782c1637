"""A small byte-level BPE for the tiny GLM-5, trained with Hugging Face
tokenizers, plus its tokenizer_config.json (GLM-5's chat template).

GLM-5's tokenizer is a byte-level BPE with the Llama-3 style pre-tokenizer
split (digits in runs of up to 3) and GLM's special tokens. This one keeps
the special tokens and the split, but splits digits one by one (\\p{N}
instead of \\p{N}{1,3}) so that every number is spelled with the same ten
digit tokens: arithmetic is then learnable digit by digit.
"""
import json
import os

SPECIAL_TOKENS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                  "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<think>",
                  "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                  "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
EOS_TOKENS = ["<|endoftext|>", "<|user|>", "<|observation|>"]

SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def single_token_words(tok, words):
    """Words that encode to one token after a space (as they appear in text)."""
    return [w for w in words if len(tok.encode(" " + w, add_special_tokens=False).ids) == 1]


def tokenizer_config(tok, chat_template):
    added = {}
    for t in SPECIAL_TOKENS:
        added[str(tok.token_to_id(t))] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "added_tokens_decoder": added,
        "chat_template": chat_template,
    }


def save_tokenizer(tok, chat_template, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok, chat_template), f, indent=2, ensure_ascii=False)
        f.write("\n")
