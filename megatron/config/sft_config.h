#pragma once
// data.sft: supervised fine-tuning on conversations (data/sft_dataset.h) instead of data.train.
//   train          JSONL files of conversations, a list of {path, weight} (or of paths), or one
//                  path; several are blended by weight (Megatron's blending)
//   valid          the same for validation; empty: the validation share of data.split is held
//                  out of each train file
//   chat_template  simple | plain | llama2 | llama3 | chatml (data/chat_template.h)
//   packing        packed (several conversations per sequence, attention and positions kept
//                  per conversation) | padded (one conversation per sequence)
//   truncation     a conversation longer than seq_length + 1 tokens: right (keep its start) |
//                  left (keep its end: the answer) | drop; in every mode one with no trained
//                  token in what is kept is dropped at start, counted and named in the log
#include <string>
#include <vector>

#include "megatron/config/key_info.h"

namespace megatron::config {

struct KeyOrigins;

struct DatasetEntry {
  std::string path;  // prefix of the .bin/.idx pair (data.train) or a JSONL file (data.sft)
  double weight = 1.0;
  bool operator==(const DatasetEntry&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("path", s.path, required_key());
    v("weight", s.weight);
  }
};

struct SFTDataConfig {
  std::vector<DatasetEntry> train, valid;
  std::string chat_template = "simple";
  std::string packing = "packed";
  std::string truncation = "right";
  bool enabled() const { return !train.empty(); }
  // Checked by DataConfig::validate.
  void validate(const KeyOrigins& origins) const;
  bool operator==(const SFTDataConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("train", s.train);
    v("valid", s.valid);
    v("chat_template", s.chat_template);
    v("packing", s.packing);
    v("truncation", s.truncation);
  }
};

}  // namespace megatron::config
