#pragma once
// SentencePiece-style BPE as Hugging Face's tokenizer.json describes it (LLaMA-2, Gemma, Phi-3):
// the BPE model runs on a word's Unicode characters (not its bytes); a character the vocabulary
// lacks becomes the byte tokens "<0xXX>" of its UTF-8 bytes (byte_fallback) or the unknown token
// (fused with a preceding one under fuse_unk); merges apply by rank as `tokenizers` applies them
// (lowest rank first, leftmost first among equal ranks). Spaces are "▁" (U+2581) by then: the
// Metaspace pre-tokenizer (or a Replace normalizer) put them there.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::data {

// The Metaspace pre-tokenizer: spaces become `replacement`; `prepend` puts one before a piece
// that does not start with it (prepend_scheme always; first: only the piece at the start of the
// text); `split` cuts before every replacement character (each word keeps its leading one).
struct Metaspace {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class Prepend : uint8_t { Always, First, Never } prepend = Prepend::Always;
  bool split = true;
  // Calls word(w) for each word of `piece`; at_start: the piece begins the text.
  template <typename OnWord>
  void apply(std::string_view piece, bool at_start, OnWord&& word) const {
    std::string s;
    const bool add = prepend == Prepend::Always || (prepend == Prepend::First && at_start);
    if (add && !piece.empty() && piece.substr(0, replacement.size()) != replacement &&
        piece[0] != ' ')
      s += replacement;
    for (char c : piece) {
      if (c == ' ')
        s += replacement;
      else
        s.push_back(c);
    }
    if (!split) {
      if (!s.empty()) word(std::string_view(s));
      return;
    }
    size_t start = 0;
    for (size_t at = s.find(replacement, 1); at != std::string::npos;
         at = s.find(replacement, at + replacement.size())) {
      word(std::string_view(s).substr(start, at - start));
      start = at;
    }
    if (start < s.size()) word(std::string_view(s).substr(start));
  }
};

class CharBpe {
 public:
  struct Options {
    bool byte_fallback = false;
    std::optional<std::string> unk_token;  // none: a character nothing covers is an error
    bool fuse_unk = false;
    bool ignore_merges = false;  // a word that is a vocabulary token is that token
  };
  // vocab: a JSON object token -> id numbering the tokens 0..n-1. Errors are InputErrors
  // starting with `source`.
  CharBpe(const nlohmann::json& vocab, std::string source, Options options);
  ~CharBpe();
  CharBpe(const CharBpe&) = delete;
  CharBpe& operator=(const CharBpe&) = delete;

  std::optional<int32_t> id_of(std::string_view token) const;
  void add_merge(std::string_view a, std::string_view b, const std::string& where,
                 const std::string& vocab_name);
  int64_t finish_loading();

  // Appends the ids of one word (valid UTF-8).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // What id decodes to before the decoder's replacements: a byte token's byte, else its text.
  const std::string& piece_of(int32_t id, const std::string& what) const;
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> pieces_;
};

}  // namespace megatron::data
