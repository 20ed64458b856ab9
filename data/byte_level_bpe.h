#pragma once
// Byte-level BPE, the core GPT-2's vocab.json/merges.txt and Hugging Face's tokenizer.json
// share: a word's UTF-8 bytes map to the 256 single-byte tokens (GPT-2's bytes_to_unicode
// alphabet), then merges apply by rank (the reference algorithm: repeatedly merge every
// occurrence of the lowest-ranked adjacent pair; a heap for long words when the ranks allow it,
// giving the same result), and the result is cached per word. BPE runs on ids: every merge
// (a, b) is stored as (id(a), id(b)) -> (rank, id(a + b)). Safe for concurrent encoding.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::data {

class ByteLevelBpe {
 public:
  // vocab: a JSON object token -> id numbering the tokens 0..n-1, each id once, with all 256
  // single-byte tokens. Tokens outside the byte alphabet (added tokens) decode to their text.
  // Errors are InputErrors starting with `source` (e.g. "GPT-2 vocab file 'x'").
  ByteLevelBpe(const nlohmann::json& vocab, std::string source);
  ~ByteLevelBpe();
  ByteLevelBpe(const ByteLevelBpe&) = delete;
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  // While loading: the id of a vocabulary token.
  std::optional<int32_t> id_of(std::string_view token) const;
  // The next merge in rank order; `where` names it in errors ("merges file 'x' line 3") and
  // `vocab_name` the vocabulary ("the vocab file 'y'").
  void add_merge(std::string_view a, std::string_view b, const std::string& where,
                 const std::string& vocab_name);
  // After the last merge: frees the loading tables; returns the number of merges.
  int64_t finish_loading();
  // LLaMA-3's ignore_merges: a word that is itself a vocabulary token is that token.
  void set_ignore_merges(bool ignore) { ignore_merges_ = ignore; }

  // What a token's text decodes to: the bytes of its code points when all are in the byte
  // alphabet, else the text itself (Hugging Face's ByteLevel decoder; added tokens too).
  static std::string token_bytes(std::string_view token);

  // Appends the ids of one pre-token (its UTF-8 bytes).
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  // The bytes (or an added token's text) id decodes to; InputError naming `what` when out of
  // range.
  const std::string& bytes_of(int32_t id, const std::string& what) const;
  int64_t size() const { return static_cast<int64_t>(id_bytes_.size()); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> id_bytes_;
  bool ignore_merges_ = false;
};

}  // namespace megatron::data
