#include "data/tokenizer_hf.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "data/byte_level_bpe.h"
#include "data/pretokenize.h"
#include "data/read_file.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace fs = std::filesystem;
namespace uc = unicode;
using json = nlohmann::json;

constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json parse_json(const std::string& path) {
  try {
    return json::parse(read_input_file(path, "tokenizer file"));
  } catch (const json::exception& e) {
    throw InputError(concat("tokenizer file '", path, "' is not valid JSON: ", e.what()));
  }
}

class HfJsonTokenizer final : public Tokenizer {
 public:
  explicit HfJsonTokenizer(const std::string& path) : path_(path) {
    const json j = parse_json(path);
    auto fail = [&](const auto&... parts) {
      return InputError(concat("'", path, "': ", parts...));
    };
    MT_INPUT_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "'", path,
                   "' has no \"model\" object (not a tokenizer.json?)");
    const json& model = j["model"];
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") throw fail("model.type '", type, "' is not supported (byte-level BPE only)");
    if (model.value("byte_fallback", false)) throw fail("model.byte_fallback is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && model[key] != "")
        throw fail("model.", key, " ", model[key].dump(), " is not supported");
    if (model.contains("dropout") && !model["dropout"].is_null())
      throw fail("model.dropout is not supported");
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const std::string n = j["normalizer"].value("type", std::string("?"));
      if (n != "NFC") throw fail("normalizer ", n, " is not supported (none or NFC)");
      nfc_ = true;  // Qwen2's
    }
    read_pre_tokenizer(j.value("pre_tokenizer", json()), fail);
    MT_INPUT_CHECK(model.contains("vocab"), "'", path, "': model has no vocab");
    bpe_ = std::make_unique<ByteLevelBpe>(model["vocab"], concat("'", path, "': model.vocab"));
    bpe_->set_ignore_merges(model.value("ignore_merges", false));
    const json merges = model.value("merges", json::array());
    MT_INPUT_CHECK(merges.is_array(), "'", path, "': model.merges is not a list");
    const std::string vocab_name = "model.vocab";
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& m = merges[r];
      const std::string where = concat("'", path, "': model.merges[", r, "]");
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        MT_INPUT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                       where, ": expected \"a b\", got ", m.dump());
        bpe_->add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1),
                        where, vocab_name);
      } else {
        MT_INPUT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                       ": expected \"a b\" or [a, b], got ", m.dump());
        bpe_->add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where, vocab_name);
      }
    }
    read_added_tokens(j.value("added_tokens", json::array()), fail);
    bpe_->finish_loading();
    vocab_ = bpe_->size();
    for (const auto& [text, id] : added_) vocab_ = std::max<int64_t>(vocab_, id + 1);
    read_post_processor(j.value("post_processor", json()), fail);
    const json decoder = j.value("decoder", json());
    if (!decoder.is_null() && decoder.value("type", std::string()) != "ByteLevel")
      throw fail("decoder ", decoder.value("type", std::string("?")),
                 " is not supported (ByteLevel only)");
    read_eos(fs::path(path).parent_path() / "tokenizer_config.json");
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::string replaced;
    text = uc::valid_utf8(text, replaced);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    std::string normalized;
    auto encode_segment = [&](std::string_view seg) {
      // NFC leaves ASCII alone; anything else is normalized first (added tokens are not).
      if (nfc_ && std::any_of(seg.begin(), seg.end(), [](char c) { return c & 0x80; })) {
        std::u32string composed;
        uc::append_nfc(uc::decode_utf8_lossy(seg), composed);
        normalized = uc::to_utf8(composed);
        seg = normalized;
      }
      auto sink = [&](size_t b, size_t e) { bpe_->encode_word(seg.substr(b, e - b), ids); };
      if (max_digits_ == 0)
        gpt2_pretokenize(seg, sink);
      else
        llama3_pretokenize(seg, max_digits_, sink);
    };
    size_t i = 0, start = 0;
    while (i < text.size()) {
      // The longest added token starting here.
      const std::map<std::string, int32_t>::value_type* hit = nullptr;
      if (!added_.empty() && first_bytes_[static_cast<unsigned char>(text[i])])
        for (const auto& entry : added_)
          if (text.compare(i, entry.first.size(), entry.first) == 0 &&
              (hit == nullptr || entry.first.size() > hit->first.size()))
            hit = &entry;
      if (hit == nullptr) {
        ++i;
        continue;
      }
      if (i > start) encode_segment(text.substr(start, i - start));
      ids.push_back(hit->second);
      i += hit->first.size();
      start = i;
    }
    if (start < text.size()) encode_segment(text.substr(start));
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string bytes;
    const std::string what = concat("HuggingFaceTokenizer(", path_, ")");
    for (int32_t id : ids) {
      const auto it = added_by_id_.find(id);
      if (it != added_by_id_.end()) {
        bytes += it->second;
        continue;
      }
      MT_INPUT_CHECK(id >= 0 && id < vocab_, what, ": token id ", id, " is out of range (vocab ",
                     vocab_, ")");
      bytes += bpe_->bytes_of(id, what);
    }
    return uc::replace_invalid_utf8(bytes);
  }

  int64_t vocab_size() const override { return vocab_; }
  int32_t eod() const override { return eos_; }
  int32_t eos() const override { return eos_; }
  int32_t bos() const override { return bos_; }
  std::string describe() const override {
    return concat("HuggingFaceTokenizer(", path_, ", byte-level BPE, ",
                  max_digits_ == 0   ? "GPT-2"
                  : max_digits_ == 3 ? "LLaMA-3"
                                     : "Qwen2",
                  " pre-tokenizer, vocab ", vocab_, ", eod ", eos_, ")");
  }

 private:
  template <typename Fail>
  void read_pre_tokenizer(const json& p, Fail&& fail) {
    auto byte_level = [&](const json& b, bool use_regex) {
      if (b.value("type", std::string()) != "ByteLevel") return false;
      if (b.value("add_prefix_space", false))
        throw fail("ByteLevel add_prefix_space is not supported");
      return b.value("use_regex", true) == use_regex;
    };
    if (p.is_object() && byte_level(p, true)) {
      max_digits_ = 0;  // GPT-2's regex
      return;
    }
    if (p.is_object() && p.value("type", std::string()) == "Sequence" &&
        p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
        p["pretokenizers"].size() == 2) {
      const json& split = p["pretokenizers"][0];
      const json& bl = p["pretokenizers"][1];
      if (split.value("type", std::string()) == "Split" && byte_level(bl, false) &&
          split.value("behavior", std::string()) == "Isolated" && !split.value("invert", false) &&
          split.contains("pattern") && split["pattern"].is_object() &&
          split["pattern"].contains("Regex")) {
        const std::string pattern = split["pattern"]["Regex"].get<std::string>();
        if (pattern == kLlama3Pattern) {
          max_digits_ = 3;
          return;
        }
        if (pattern == kQwen2Pattern) {
          max_digits_ = 1;
          return;
        }
        throw fail("pre-tokenizer regex ", json(pattern).dump(),
                   " is not one this build implements (GPT-2's, LLaMA-3's, Qwen2's)");
      }
    }
    throw fail("pre_tokenizer ", p.dump().substr(0, 200),
               " is not supported (ByteLevel, or Split(LLaMA-3/Qwen2 regex) + ByteLevel)");
  }

  template <typename Fail>
  void read_added_tokens(const json& list, Fail&& fail) {
    if (!list.is_array()) throw fail("added_tokens is not a list");
    for (const json& t : list) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          !t.contains("content") || !t["content"].is_string() || t["content"] == "")
        throw fail("added token ", t.dump(), " needs an integer id and non-empty content");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (t.value(key, false))
          throw fail("added token ", t["content"].dump(), ": ", key, " is not supported");
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw fail("added token id ", id, " is out of range");
      const std::string content = t["content"].get<std::string>();
      added_[content] = static_cast<int32_t>(id);
      added_by_id_[static_cast<int32_t>(id)] = content;
      first_bytes_[static_cast<unsigned char>(content[0])] = true;
    }
  }

  template <typename Fail>
  void read_post_processor(const json& p, Fail&& fail) {
    if (p.is_null()) return;
    const std::string type = p.value("type", std::string());
    if (type == "ByteLevel") return;
    if (type != "TemplateProcessing")
      throw fail("post_processor ", type, " is not supported (TemplateProcessing, ByteLevel)");
    const json single = p.value("single", json::array());
    if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
      const std::string token = single[0]["SpecialToken"].value("id", std::string());
      const auto it = added_.find(token);
      if (it != added_.end()) bos_ = it->second;
    }
  }

  // tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}); "" when absent.
  static std::string config_token(const fs::path& config, const char* key) {
    std::error_code ec;
    if (!fs::is_regular_file(config, ec)) return {};
    const json c = parse_json(config.string());
    if (!c.is_object() || !c.contains(key)) return {};
    const json& e = c[key];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string())
      return e["content"].get<std::string>();
    return {};
  }

  void read_eos(const fs::path& config) {
    const std::string bos = config_token(config, "bos_token");
    if (const auto it = added_.find(bos); !bos.empty() && it != added_.end()) bos_ = it->second;
    const std::string eos = config_token(config, "eos_token");
    for (const std::string& name :
         {eos, std::string("<|endoftext|>"), std::string("<|end_of_text|>"), std::string("</s>")}) {
      if (name.empty()) continue;
      const auto it = added_.find(name);
      if (it != added_.end()) {
        eos_ = it->second;
        return;
      }
    }
  }

  std::string path_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::map<std::string, int32_t> added_;
  std::map<int32_t, std::string> added_by_id_;
  std::array<bool, 256> first_bytes_{};
  int max_digits_ = 0;  // 0: GPT-2's pre-tokenizer; else LLaMA-3's digit groups
  bool nfc_ = false;    // the NFC normalizer
  int64_t vocab_ = 0;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model);

std::unique_ptr<Tokenizer> make_huggingface_tokenizer(const std::string& path) {
  MT_INPUT_CHECK(!path.empty(),
                 "HuggingFaceTokenizer needs a tokenizer directory or file "
                 "(data.tokenizer.model / --tokenizer-model), but none was given");
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path json_file = fs::path(path) / "tokenizer.json";
    const fs::path sp_file = fs::path(path) / "tokenizer.model";
    if (fs::is_regular_file(json_file, ec))
      return std::make_unique<HfJsonTokenizer>(json_file.string());
    if (fs::is_regular_file(sp_file, ec)) return make_sentencepiece_tokenizer(sp_file.string());
    throw InputError(concat("Hugging Face tokenizer directory '", path,
                            "' has neither tokenizer.json nor tokenizer.model"));
  }
  MT_INPUT_CHECK(fs::is_regular_file(path, ec), "Hugging Face tokenizer '", path,
                 "' does not exist");
  if (fs::path(path).extension() == ".json") return std::make_unique<HfJsonTokenizer>(path);
  return make_sentencepiece_tokenizer(path);
}

}  // namespace megatron::data
