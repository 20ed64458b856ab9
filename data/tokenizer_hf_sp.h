#pragma once
// The SentencePiece-style parts of a Hugging Face tokenizer.json (data/tokenizer_hf.h): the
// Metaspace pre-tokenizer's settings, the BPE model's byte_fallback / unk_token / fuse_unk, and
// the decoders that undo them (Metaspace, or a Sequence of Replace("▁" -> " "), ByteFallback,
// Fuse and Strip). Each reader throws an InputError naming the file and the setting it cannot
// honour.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/char_bpe.h"

namespace megatron::data {

struct SpDecoder {
  bool metaspace_to_space = false;   // "▁" -> " " (Replace, or the Metaspace decoder)
  int64_t strip_leading_spaces = 0;  // Strip(" ", start) after Fuse, or Metaspace's prefix
};

Metaspace read_metaspace(const nlohmann::json& pre_tokenizer, const std::string& path);
CharBpe::Options read_char_bpe_options(const nlohmann::json& model, const std::string& path);
SpDecoder read_sp_decoder(const nlohmann::json& decoder, const std::string& path);
// The text of `pieces` (each token's piece: an added token's content, a byte token's byte, else
// its text) as the decoder makes it.
std::string decode_sp(const SpDecoder& decoder, const std::vector<const std::string*>& pieces,
                      const std::vector<bool>& is_added);

}  // namespace megatron::data
