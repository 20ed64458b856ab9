#pragma once
// The SentencePiece-style parts of a Hugging Face tokenizer.json (data/tokenizer_hf.h): the
// Metaspace pre-tokenizer's settings, Gemma's Split(" ", MergedWithPrevious), the BPE model's
// byte_fallback / unk_token / fuse_unk, and the decoders that undo them (Metaspace, or a Sequence
// of Replace("▁" -> " "), ByteFallback, Fuse and Strip). Each reader throws an InputError naming
// the file and the setting it cannot honour.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/char_bpe.h"

namespace megatron::data {

struct SpDecoder {
  bool metaspace_to_space = false;   // "▁" -> " " (Replace, or the Metaspace decoder)
  int64_t strip_leading_spaces = 0;  // Strip(" ", start) after Fuse, or Metaspace's prefix
};

Metaspace read_metaspace(const nlohmann::json& pre_tokenizer, const std::string& path);

// tokenizers' Split pre-tokenizer on a literal string with behavior MergedWithPrevious (Gemma's,
// on " "): every occurrence of the delimiter ends the piece before it, except that one right
// after another occurrence is a piece of its own.
struct LiteralSplit {
  std::string delimiter;
  template <typename Word>
  void apply(std::string_view text, Word&& word) const {
    size_t piece = 0, pos = 0;
    bool previous_match = false;
    while (pos < text.size()) {
      const size_t m = text.find(delimiter, pos);
      if (m != pos) {  // text up to the next occurrence: a piece of its own
        if (pos > piece) word(text.substr(piece, pos - piece));
        piece = pos;
        pos = m == std::string_view::npos ? text.size() : m;
        previous_match = false;
        continue;
      }
      if (previous_match && pos > piece) {  // a second occurrence in a row starts a piece
        word(text.substr(piece, pos - piece));
        piece = pos;
      }
      pos += delimiter.size();
      previous_match = true;
    }
    if (pos > piece) word(text.substr(piece, pos - piece));
  }
};
// Null when `pre_tokenizer` is not a Split; throws for a Split this build cannot honour.
std::optional<LiteralSplit> read_literal_split(const nlohmann::json& pre_tokenizer,
                                               const std::string& path);
CharBpe::Options read_char_bpe_options(const nlohmann::json& model, const std::string& path);
SpDecoder read_sp_decoder(const nlohmann::json& decoder, const std::string& path);
// The text of `pieces` (each token's piece: an added token's content, a byte token's byte, else
// its text) as the decoder makes it.
std::string decode_sp(const SpDecoder& decoder, const std::vector<const std::string*>& pieces,
                      const std::vector<bool>& is_added);

}  // namespace megatron::data
