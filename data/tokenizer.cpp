#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "data/tokenizer_hf.h"
#include "megatron/config/recipe.h"
#include "megatron/core/error.h"

namespace megatron::data {

Tokenizer::~Tokenizer() = default;
int32_t Tokenizer::pad() const { return -1; }
int32_t Tokenizer::bos() const { return -1; }
int32_t Tokenizer::prompt_bos() const { return -1; }
int32_t Tokenizer::eos() const { return -1; }
int32_t Tokenizer::cls() const { return -1; }
int32_t Tokenizer::sep() const { return -1; }
int32_t Tokenizer::mask() const { return -1; }
int32_t Tokenizer::unk() const { return -1; }
std::string Tokenizer::describe() const { return concat("Tokenizer(vocab ", vocab_size(), ")"); }

// ---- ByteTokenizer ------------------------------------------------------------------

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id == kEod) {
      out += kEodPiece;
      continue;
    }
    MT_INPUT_CHECK(id >= 0 && id < 256, "ByteTokenizer: token id ", id,
                   " is out of range (vocab 257: bytes 0..255, EOD 256)");
    out.push_back(static_cast<char>(id));
  }
  return out;
}

// ---- SentencePieceTokenizer -----------------------------------------------------------

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model) : model_path_(model) {
    MT_INPUT_CHECK(!model.empty(),
                   "SentencePieceTokenizer needs a model file (tokenizer model / "
                   "--tokenizer-model), but none was given");
    MT_INPUT_CHECK(std::filesystem::is_regular_file(model), "SentencePiece model file '", model,
                   "' does not exist or is not a regular file");
    const auto status = sp_.Load(model);
    MT_INPUT_CHECK(status.ok(), "cannot load SentencePiece model '", model,
                   "': ", status.ToString());
    vocab_ = sp_.GetPieceSize();
    MT_INPUT_CHECK(vocab_ > 0, "SentencePiece model '", model, "' has an empty vocabulary");
    const int eod_piece = sp_.PieceToId(absl::string_view(kEodPiece.data(), kEodPiece.size()));
    if (eod_piece >= 0 && eod_piece != sp_.unk_id() && !sp_.IsUnknown(eod_piece)) {
      eod_ = eod_piece;
    } else {
      eod_ = sp_.eos_id();
    }
    MT_INPUT_CHECK(eod_ >= 0, "SentencePiece model '", model, "' has neither an '", kEodPiece,
                   "' piece nor an end-of-sentence id, so it has no EOD token");
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(absl::string_view(text.data(), text.size()), &ids);
    MT_INPUT_CHECK(status.ok(), "SentencePiece model '", model_path_,
                   "' failed to encode text: ", status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (int32_t id : ids) {
      MT_INPUT_CHECK(id >= 0 && id < vocab_, "SentencePiece model '", model_path_, "': token id ",
                     id, " is out of range (vocab ", vocab_, ")");
      v.push_back(id);
    }
    std::string out;
    const auto status = sp_.Decode(v, &out);
    MT_INPUT_CHECK(status.ok(), "SentencePiece model '", model_path_,
                   "' failed to decode ids: ", status.ToString());
    return out;
  }

  int64_t vocab_size() const override { return vocab_; }
  int32_t eod() const override { return eod_; }
  int32_t pad() const override { return sp_.pad_id(); }
  int32_t bos() const override { return sp_.bos_id(); }
  int32_t eos() const override { return sp_.eos_id(); }
  std::string describe() const override {
    return concat("SentencePieceTokenizer(", model_path_, ", vocab ", vocab_, ", eod ", eod_, ")");
  }

 private:
  std::string model_path_;
  sentencepiece::SentencePieceProcessor sp_;
  int64_t vocab_ = 0;
  int32_t eod_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model) {
  return std::make_unique<SentencePieceTokenizer>(model);
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  using config::TokenizerType;
  switch (spec.type) {
    case TokenizerType::SentencePiece:
      return std::make_unique<SentencePieceTokenizer>(spec.model);
    case TokenizerType::Byte:
      return std::make_unique<ByteTokenizer>();
    case TokenizerType::HuggingFace:
      return make_huggingface_tokenizer(spec.model);
    case TokenizerType::GPT2BPE:
      MT_INPUT_CHECK(!spec.vocab_file.empty() && !spec.merge_file.empty(),
                     "GPT2BPETokenizer needs a vocab file (vocab.json, --vocab-file) and a merges "
                     "file (merges.txt, --merge-file)");
      return std::make_unique<GPT2BPETokenizer>(spec.vocab_file, spec.merge_file);
    case TokenizerType::BertWordPieceLowerCase:
    case TokenizerType::BertWordPieceCase:
      return std::make_unique<BertWordPieceTokenizer>(
          spec.vocab_file, spec.type == TokenizerType::BertWordPieceLowerCase);
    case TokenizerType::Null:
      break;
  }
  throw InputError(
      "NullTokenizer reads no text: it is for pre-tokenized data (a vocabulary size only)");
}

TokenizerSpec tokenizer_spec(const config::Recipe& recipe) {
  const config::TokenizerConfig& t = recipe.data.tokenizer;
  MT_INPUT_CHECK(t.type.has_value(), recipe.source_path.empty() ? "recipe" : recipe.source_path,
                 ": data.tokenizer.type: required key is missing");
  return {*t.type, config::resolve_path(recipe, t.vocab_file),
          config::resolve_path(recipe, t.merge_file), config::resolve_path(recipe, t.model)};
}

config::TokenizerType parse_tokenizer_type(const std::string& name) {
  const std::optional<config::TokenizerType> t = config::parse_option<config::TokenizerType>(name);
  MT_INPUT_CHECK(t.has_value(), "unknown tokenizer type '", name, "' (expected one of ",
                 config::option_list<config::TokenizerType>(), ")");
  return *t;
}

}  // namespace megatron::data
