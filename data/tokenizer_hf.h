#pragma once
// HuggingFaceTokenizer (Megatron's --tokenizer-type HuggingFaceTokenizer, --tokenizer-model a
// Hugging Face model directory): the directory's tokenizer.json when it has one, else its
// tokenizer.model (SentencePiece, LLaMA-2). `path` may also name either file.
//
// tokenizer.json: byte-level BPE (model.type BPE, merges as "a b" strings or [a, b] pairs,
// ignore_merges honoured) with a pre-tokenizer that is GPT-2's ByteLevel regex, or a Split on
// LLaMA-3's, Qwen2's or Mistral-NeMo's (tekken) regex followed by ByteLevel without regex
// (data/pretokenize.h); or SentencePiece-style BPE over characters (data/char_bpe.h: LLaMA-2,
// Gemma, Phi-3) with the Metaspace pre-tokenizer (prepend_scheme always / first / never, split
// or not) or none (LLaMA-2's Prepend + Replace normalizer), byte_fallback, unk_token and
// fuse_unk, decoded by the Metaspace decoder or Replace / ByteFallback / Fuse / Strip
// (data/tokenizer_hf_sp.h). The normalizer is none, or NFC, NFD, NFKC, NFKD, Lowercase,
// StripAccents, Strip, Replace (String patterns), Prepend, or a Sequence of these, applied as
// `tokenizers` does: added tokens with normalized=false are found in the raw text first (longest
// at the earliest position) and become their ids; each piece between them is normalized on its
// own, the normalized=true added tokens are found in it by their normalized content, and the rest
// is pre-tokenized. Unicode data: data/unicode_tables.h (Unicode 14.0; `tokenizers` normalizes
// with Unicode 9.0 data, so code points assigned after 9.0 may normalize differently). encode()
// adds no special tokens (tokenizers' add_special_tokens=False); bos() is the post-processor
// template's leading special token, or tokenizer_config.json's bos_token when that is an added
// token; prompt_bos() is the template's leading special token, unless tokenizer_config.json sets
// add_bos_token (true: bos(), false: none; transformers then rebuilds the template). eod()/eos():
// tokenizer_config.json's eos_token when present, else the first of
// <|endoftext|>, <|end_of_text|>, </s> that is a token; -1 when none.
// Added tokens with lstrip / rstrip take the whitespace before / after them; single_word ones
// match only with no word character (Rust regex's \w) next to them. Anything else
// (another model type, normalizer or regex, a Regex Replace) is an
// InputError naming the file and the setting.
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace megatron::data {

std::unique_ptr<Tokenizer> make_huggingface_tokenizer(const std::string& path);

}  // namespace megatron::data
