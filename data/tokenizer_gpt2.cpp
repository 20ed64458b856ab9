// GPT2BPETokenizer: GPT-2's byte-level BPE (vocab.json + merges.txt).
//
// encode = pre-tokenize (GPT-2's regex, by hand: data/pretokenize.h) -> byte-level BPE
// (data/byte_level_bpe.h) per pre-token.
#include <nlohmann/json.hpp>

#include "data/byte_level_bpe.h"
#include "data/pretokenize.h"
#include "data/read_file.h"
#include "data/tokenizer.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

std::string read_whole_file(const std::string& path, const char* what) {
  MT_INPUT_CHECK(!path.empty(), "GPT2BPETokenizer needs a ", what, " but none was given");
  return read_input_file(path, concat("GPT-2 ", what));
}

nlohmann::json parse_vocab(const std::string& vocab_file) {
  const std::string text = read_whole_file(vocab_file, "vocab file (vocab.json)");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
    throw InputError(concat("GPT-2 vocab file '", vocab_file, "' is not valid JSON: ", e.what()));
  }
}

}  // namespace

struct GPT2BPETokenizer::Impl {
  Impl(const std::string& vocab, const std::string& merge)
      : vocab_file(vocab),
        merge_file(merge),
        bpe(parse_vocab(vocab), concat("GPT-2 vocab file '", vocab, "'")) {}
  std::string vocab_file, merge_file;
  ByteLevelBpe bpe;
  int32_t eod = -1;
  void load_merges();
};

void GPT2BPETokenizer::Impl::load_merges() {
  const std::string text = read_whole_file(merge_file, "merges file (merges.txt)");
  MT_INPUT_CHECK(uc::find_invalid_utf8(text) == std::string_view::npos, "GPT-2 merges file '",
                 merge_file, "' is not valid UTF-8 (at byte ", uc::find_invalid_utf8(text), ")");
  const std::string vocab_name = concat("the vocab file '", vocab_file, "'");
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line_no == 1 && line.starts_with("#version")) continue;
    std::vector<std::string_view> parts;
    for (size_t k = 0; k < line.size();) {
      while (k < line.size() && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' ||
                                 line[k] == '\v' || line[k] == '\f'))
        ++k;
      size_t e = k;
      while (e < line.size() && !(line[e] == ' ' || line[e] == '\t' || line[e] == '\r' ||
                                  line[e] == '\v' || line[e] == '\f'))
        ++e;
      if (e > k) parts.push_back(line.substr(k, e - k));
      k = e;
    }
    if (parts.empty()) continue;  // a blank line
    const std::string where = concat("GPT-2 merges file '", merge_file, "' line ", line_no);
    MT_INPUT_CHECK(parts.size() == 2, where, ": expected two space-separated tokens, got ",
                   parts.size(), " ('", line, "')");
    bpe.add_merge(parts[0], parts[1], where, vocab_name);
  }
  const auto eod_id = bpe.id_of(kEodPiece);
  MT_INPUT_CHECK(eod_id.has_value(), "GPT-2 vocab file '", vocab_file, "' has no '", kEodPiece,
                 "' token (the end-of-document id)");
  eod = *eod_id;
  // Without merges every word falls apart into bytes: silently useless ids, not a tokenizer.
  MT_INPUT_CHECK(bpe.finish_loading() > 0, "GPT-2 merges file '", merge_file,
                 "' has no merges (empty, or only a #version line)");
}

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : impl_(std::make_unique<Impl>(vocab_file, merge_file)) {
  impl_->load_merges();
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::vector<std::string_view> GPT2BPETokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  gpt2_pretokenize(text, [&](size_t b, size_t e) { out.push_back(text.substr(b, e - b)); });
  return out;
}

std::vector<int32_t> GPT2BPETokenizer::encode(std::string_view text) const {
  std::string replaced;
  text = uc::valid_utf8(text, replaced);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  gpt2_pretokenize(text,
                   [&](size_t b, size_t e) { impl_->bpe.encode_word(text.substr(b, e - b), ids); });
  return ids;
}

std::string GPT2BPETokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  const std::string what = concat("GPT2BPETokenizer(", impl_->vocab_file, ")");
  for (int32_t id : ids) bytes += impl_->bpe.bytes_of(id, what);
  return uc::replace_invalid_utf8(bytes);
}

int64_t GPT2BPETokenizer::vocab_size() const { return impl_->bpe.size(); }
int32_t GPT2BPETokenizer::eod() const { return impl_->eod; }

std::string GPT2BPETokenizer::describe() const {
  return concat("GPT2BPETokenizer(", impl_->vocab_file, ", ", impl_->merge_file, ", vocab ",
                vocab_size(), ", eod ", impl_->eod, ")");
}

}  // namespace megatron::data
