#pragma once
// HuggingFaceTokenizer (Megatron's --tokenizer-type HuggingFaceTokenizer, --tokenizer-model a
// Hugging Face model directory): the directory's tokenizer.json when it has one, else its
// tokenizer.model (SentencePiece, LLaMA-2). `path` may also name either file.
//
// tokenizer.json: byte-level BPE (model.type BPE, merges as "a b" strings or [a, b] pairs,
// ignore_merges honoured, no byte fallback), no normalizer, and a pre-tokenizer that is GPT-2's
// ByteLevel regex, or a Split on LLaMA-3's or Qwen2's regex followed by ByteLevel without regex
// (data/pretokenize.h), after Qwen2's NFC normalizer when there is one; added tokens are matched in
// the text first (longest at the earliest position) and become their ids. encode() adds no special
// tokens (tokenizers' add_special_tokens=False); bos() is the post-processor template's leading
// special token, or tokenizer_config.json's bos_token when that is an added token. eod()/eos(): tokenizer_config.json's eos_token when present, else the first of
// <|endoftext|>, <|end_of_text|>, </s> that is a token; -1 when none.
// Anything else (another model type, another normalizer, another regex, lstrip/rstrip added tokens)
// is an InputError naming the file and the setting.
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace megatron::data {

std::unique_ptr<Tokenizer> make_huggingface_tokenizer(const std::string& path);

}  // namespace megatron::data
