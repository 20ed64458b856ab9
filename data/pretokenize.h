#pragma once
// The pre-tokenizers of the byte-level BPE tokenizers, by hand (no regex engine): each calls
// f(begin, end) for every match of its pattern over valid UTF-8 text, in order; the matches tile
// the text. \p{L}, \p{N} and \s are Unicode's letters, numbers and White_Space
// (data/tokenizer_unicode.h).
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           (OpenAI's encoder.py, Hugging Face's ByteLevel pre-tokenizer with use_regex)
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (LLaMA-3's tokenizer.json with N = 3; Qwen2's with \p{N} alone, N = 1; Qwen3.5's
//           also with \p{N} alone and [\p{L}\p{M}] for \p{L}, [^\s\p{L}\p{M}\p{N}] for the
//           punctuation: marks join words)
//   tekken: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
//           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
//           \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (Mistral-NeMo's tokenizer.json: words split at case changes, single digits),
//           matched like Oniguruma does (alternatives in order, backtracking quantifiers)
#include <cstddef>
#include <functional>
#include <string_view>

namespace megatron::data {

using PretokenSink = std::function<void(size_t begin, size_t end)>;

void gpt2_pretokenize(std::string_view text, const PretokenSink& f);
struct Llama3Pattern {
  int max_digits = 3;           // \p{N}{1,max_digits}
  bool marks_in_words = false;  // \p{M} counts as \p{L}
};
void llama3_pretokenize(std::string_view text, const Llama3Pattern& pattern, const PretokenSink& f);
void tekken_pretokenize(std::string_view text, const PretokenSink& f);

}  // namespace megatron::data
