#include "data/tokenizer_export.h"

#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>

#include "data/read_file.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

using Json = nlohmann::ordered_json;

// The piece of id, or null when the model has no such id (-1).
Json piece_or_null(const sentencepiece::SentencePieceProcessor& sp, int id) {
  return id >= 0 && id < sp.GetPieceSize() ? Json(sp.IdToPiece(id)) : Json(nullptr);
}

}  // namespace

std::map<std::string, std::string> sentencepiece_hf_files(const std::string& model_path) {
  const std::string bytes = read_input_file(model_path, "SentencePiece model");
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.LoadFromSerializedProto(bytes);
  MT_INPUT_CHECK(status.ok(), "cannot load SentencePiece model '", model_path,
                 "': ", status.ToString());
  // The end-of-document piece the trainer appended to every document (data/tokenizer.h).
  const int eod = sp.PieceToId("<|endoftext|>");
  const int eos = eod >= 0 && eod != sp.unk_id() ? eod : sp.eos_id();
  // add_dummy_prefix: "a" encodes as "\u2581a" then.
  std::vector<std::string> pieces;
  (void)sp.Encode("a", &pieces);
  const bool dummy_prefix = !pieces.empty() && pieces.front().rfind("\xE2\x96\x81", 0) == 0;
  Json config = {{"tokenizer_class", "LlamaTokenizer"},
                 {"bos_token", piece_or_null(sp, sp.bos_id())},
                 {"eos_token", piece_or_null(sp, eos)},
                 {"unk_token", piece_or_null(sp, sp.unk_id())},
                 {"pad_token", piece_or_null(sp, sp.pad_id())},
                 {"add_bos_token", false},
                 {"add_eos_token", false},
                 {"add_prefix_space", dummy_prefix},
                 {"legacy", false},
                 {"clean_up_tokenization_spaces", false}};
  return {{"tokenizer.model", bytes}, {"tokenizer_config.json", config.dump(2) + "\n"}};
}

std::map<std::string, std::string> gpt2_hf_files(const std::string& vocab_path,
                                                 const std::string& merges_path) {
  Json config = {{"tokenizer_class", "GPT2Tokenizer"}, {"bos_token", "<|endoftext|>"},
                 {"eos_token", "<|endoftext|>"},       {"unk_token", "<|endoftext|>"},
                 {"add_prefix_space", false},          {"clean_up_tokenization_spaces", false}};
  return {{"vocab.json", read_input_file(vocab_path, "GPT-2 vocab file")},
          {"merges.txt", read_input_file(merges_path, "GPT-2 merges file")},
          {"tokenizer_config.json", config.dump(2) + "\n"}};
}

}  // namespace megatron::data
