#include "data/tokenizer_hf.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "data/byte_level_bpe.h"
#include "data/char_bpe.h"
#include "data/pretokenize.h"
#include "data/read_file.h"
#include "data/tokenizer_hf_added.h"
#include "data/tokenizer_hf_sp.h"
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
constexpr const char* kQwen35Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Mistral-NeMo's (tekken).
constexpr const char* kTekkenPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// kMetaspace, kLiteralSplit and kNone: SentencePiece-style BPE over characters
// (data/char_bpe.h); the others byte-level.
enum class PreTokenizer {
  kGpt2,
  kLlama3,
  kQwen2,
  kQwen35,
  kTekken,
  kMetaspace,
  kLiteralSplit,
  kNone
};

// One step of the normalizer; a Sequence is flattened into its steps.
struct NormalizerStep {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStripAccents, kStrip, kReplace, kPrepend };
  explicit NormalizerStep(Kind k) : kind(k) {}
  Kind kind;
  bool left = false, right = false;  // Strip
  std::u32string pattern, content;   // Replace: pattern -> content; Prepend: content
};

// obj[key] when obj is an object and it is a string; nullptr otherwise.
const std::string* string_at(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

std::string type_of(const json& obj) {
  const std::string* t = string_at(obj, "type");
  return t != nullptr ? *t : std::string("?");
}

json parse_json(const std::string& path) {
  try {
    return json::parse(read_input_file(path, "tokenizer file"));
  } catch (const json::exception& e) {
    throw InputError(concat("tokenizer file '", path, "' is not valid JSON: ", e.what()));
  }
}

class HfJsonTokenizer final : public Tokenizer {
 public:
  explicit HfJsonTokenizer(const std::string& path) try : path_(path) {
    const json j = parse_json(path);
    auto fail = [&](const auto&... parts) {
      return InputError(concat("'", path, "': ", parts...));
    };
    MT_INPUT_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "'", path,
                   "' has no \"model\" object (not a tokenizer.json?)");
    const json& model = j["model"];
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") throw fail("model.type '", type, "' is not supported (BPE only)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && model[key] != "")
        throw fail("model.", key, " ", model[key].dump(), " is not supported");
    if (model.contains("dropout") && !model["dropout"].is_null())
      throw fail("model.dropout is not supported");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      read_normalizer(j["normalizer"], "normalizer", fail);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), fail);
    MT_INPUT_CHECK(model.contains("vocab"), "'", path, "': model has no vocab");
    if (sp_style()) {
      char_bpe_ = std::make_unique<CharBpe>(model["vocab"], concat("'", path, "': model.vocab"),
                                            read_char_bpe_options(model, path));
    } else {
      if (model.value("byte_fallback", false))
        throw fail("model.byte_fallback with a byte-level pre-tokenizer is not supported");
      bpe_ = std::make_unique<ByteLevelBpe>(model["vocab"], concat("'", path, "': model.vocab"));
      bpe_->set_ignore_merges(model.value("ignore_merges", false));
    }
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
        add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1),
                  where, vocab_name);
      } else {
        MT_INPUT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                       ": expected \"a b\" or [a, b], got ", m.dump());
        add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where, vocab_name);
      }
    }
    read_added_tokens(j.value("added_tokens", json::array()), fail);
    vocab_ = sp_style() ? (char_bpe_->finish_loading(), char_bpe_->size())
                        : (bpe_->finish_loading(), bpe_->size());
    for (const auto& [text, id] : added_) vocab_ = std::max<int64_t>(vocab_, id + 1);
    read_post_processor(j.value("post_processor", json()), fail);
    const json decoder = j.value("decoder", json());
    if (sp_style()) {
      sp_decoder_ = read_sp_decoder(decoder, path);
    } else if (!decoder.is_null() && decoder.value("type", std::string()) != "ByteLevel") {
      throw fail("decoder ", decoder.value("type", std::string("?")),
                 " is not supported with byte-level BPE (ByteLevel only)");
    }
    read_config(fs::path(path).parent_path() / "tokenizer_config.json");
  } catch (const json::exception& e) {
    // A value of the wrong JSON type where no check above looks (e.g. a non-boolean flag).
    throw InputError(concat("'", path, "': a value has the wrong JSON type: ", e.what()));
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::string replaced;
    text = uc::valid_utf8(text, replaced);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    auto add_id = [&](int32_t id) { ids.push_back(id); };
    bool segment_at_start = false;  // the piece being encoded starts the text (Metaspace first)
    const char* normalized_start = nullptr;
    auto encode_piece = [&](std::string_view piece) {
      if (sp_style()) {
        const bool at_start = segment_at_start && piece.data() == normalized_start;
        auto word = [&](std::string_view w) { char_bpe_->encode_word(w, ids); };
        if (pre_tokenizer_ == PreTokenizer::kMetaspace)
          metaspace_.apply(piece, at_start, word);
        else if (pre_tokenizer_ == PreTokenizer::kLiteralSplit)
          literal_split_.apply(piece, word);
        else
          word(piece);
        return;
      }
      auto sink = [&](size_t b, size_t e) { bpe_->encode_word(piece.substr(b, e - b), ids); };
      switch (pre_tokenizer_) {
        case PreTokenizer::kGpt2:
          gpt2_pretokenize(piece, sink);
          break;
        case PreTokenizer::kLlama3:
          llama3_pretokenize(piece, {3, false}, sink);
          break;
        case PreTokenizer::kQwen2:
          llama3_pretokenize(piece, {1, false}, sink);
          break;
        case PreTokenizer::kQwen35:
          llama3_pretokenize(piece, {1, true}, sink);
          break;
        case PreTokenizer::kTekken:
          tekken_pretokenize(piece, sink);
          break;
        default:
          break;
      }
    };
    // As `tokenizers` does: added tokens with normalized=false are found in the raw text; each
    // piece between them is normalized on its own, then the normalized=true ones (by their
    // normalized content) are found in it; the rest is pre-tokenized.
    split_added(
        text, raw_added_,
        [&](std::string_view segment) {
          segment_at_start = segment.data() == text.data();
          std::string normalized;
          if (!normalizer_.empty()) segment = normalized = normalize(segment);
          normalized_start = segment.data();
          split_added(segment, normalized_added_, encode_piece, add_id);
        },
        add_id);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    if (sp_style()) return decode_pieces(ids);
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
  int32_t prompt_bos() const override { return prompt_bos_; }
  std::string describe() const override {
    const char* pre = pre_tokenizer_ == PreTokenizer::kGpt2           ? "GPT-2"
                      : pre_tokenizer_ == PreTokenizer::kLlama3       ? "LLaMA-3"
                      : pre_tokenizer_ == PreTokenizer::kQwen2        ? "Qwen2"
                      : pre_tokenizer_ == PreTokenizer::kQwen35       ? "Qwen3.5"
                      : pre_tokenizer_ == PreTokenizer::kMetaspace    ? "Metaspace"
                      : pre_tokenizer_ == PreTokenizer::kLiteralSplit ? "Split(literal)"
                      : pre_tokenizer_ == PreTokenizer::kNone         ? "no"
                                                                      : "Mistral-NeMo (tekken)";
    return concat("HuggingFaceTokenizer(", path_,
                  sp_style() ? ", SentencePiece-style BPE, " : ", byte-level BPE, ",
                  normalizer_.empty() ? "" : concat(normalizer_name_, " normalizer, "), pre,
                  " pre-tokenizer, vocab ", vocab_, ", eod ", eos_, ")");
  }

 private:
  // SentencePiece-style decoding: each token's piece through sp_decoder_.
  std::string decode_pieces(const std::vector<int32_t>& ids) const {
    const std::string what = concat("HuggingFaceTokenizer(", path_, ")");
    std::vector<const std::string*> pieces;
    std::vector<bool> is_added;
    for (int32_t id : ids) {
      const auto it = added_by_id_.find(id);
      is_added.push_back(it != added_by_id_.end());
      pieces.push_back(it != added_by_id_.end() ? &it->second : &char_bpe_->piece_of(id, what));
    }
    return decode_sp(sp_decoder_, pieces, is_added);
  }

  bool sp_style() const {
    return pre_tokenizer_ == PreTokenizer::kMetaspace ||
           pre_tokenizer_ == PreTokenizer::kLiteralSplit || pre_tokenizer_ == PreTokenizer::kNone;
  }
  void add_merge(std::string_view a, std::string_view b, const std::string& where,
                 const std::string& vocab_name) {
    if (sp_style())
      char_bpe_->add_merge(a, b, where, vocab_name);
    else
      bpe_->add_merge(a, b, where, vocab_name);
  }

  template <typename Fail>
  void read_pre_tokenizer(const json& p, Fail&& fail) {
    if (p.is_null()) {  // the whole piece is the word (LLaMA-2's: spaces replaced beforehand)
      pre_tokenizer_ = PreTokenizer::kNone;
      return;
    }
    if (p.is_object() && p.value("type", std::string()) == "Metaspace") {
      metaspace_ = data::read_metaspace(p, path_);
      pre_tokenizer_ = PreTokenizer::kMetaspace;
      return;
    }
    if (auto split = data::read_literal_split(p, path_)) {  // Gemma's Split(" ")
      literal_split_ = std::move(*split);
      pre_tokenizer_ = PreTokenizer::kLiteralSplit;
      return;
    }
    auto byte_level = [&](const json& b, bool use_regex) {
      if (b.value("type", std::string()) != "ByteLevel") return false;
      if (b.value("add_prefix_space", false))
        throw fail("ByteLevel add_prefix_space is not supported");
      return b.value("use_regex", true) == use_regex;
    };
    if (p.is_object() && byte_level(p, true)) {
      pre_tokenizer_ = PreTokenizer::kGpt2;  // GPT-2's regex
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
          string_at(split["pattern"], "Regex") != nullptr) {
        const std::string pattern = *string_at(split["pattern"], "Regex");
        if (pattern == kLlama3Pattern) {
          pre_tokenizer_ = PreTokenizer::kLlama3;
          return;
        }
        if (pattern == kQwen2Pattern) {
          pre_tokenizer_ = PreTokenizer::kQwen2;
          return;
        }
        if (pattern == kQwen35Pattern) {
          pre_tokenizer_ = PreTokenizer::kQwen35;
          return;
        }
        if (pattern == kTekkenPattern) {
          pre_tokenizer_ = PreTokenizer::kTekken;
          return;
        }
        throw fail("pre-tokenizer regex ", json(pattern).dump(),
                   " is not one this build implements (GPT-2's, LLaMA-3's, Qwen2's, "
                   "Qwen3.5's, Mistral-NeMo's)");
      }
    }
    throw fail("pre_tokenizer ", p.dump().substr(0, 200),
               " is not supported (ByteLevel, Split(LLaMA-3/Qwen2/Qwen3.5/Mistral-NeMo regex) + "
               "ByteLevel, Metaspace or none)");
  }

  template <typename Fail>
  void read_added_tokens(const json& list, Fail&& fail) {
    if (!list.is_array()) throw fail("added_tokens is not a list");
    for (const json& t : list) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          !t.contains("content") || !t["content"].is_string() || t["content"] == "")
        throw fail("added token ", t.dump(), " needs an integer id and non-empty content");
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw fail("added token id ", id, " is out of range");
      const std::string content = t["content"].get<std::string>();
      if (uc::find_invalid_utf8(content) != std::string::npos)
        throw fail("added token ", t["content"].dump(), " is not valid UTF-8");
      // `tokenizers` writes "normalized" always; AddedToken's own default is !special.
      const auto flag = [&](const char* key, bool fallback) {
        if (!t.contains(key)) return fallback;
        if (!t[key].is_boolean())
          throw fail("added token ", t["content"].dump(), ": ", key, " is not true/false");
        return t[key].get<bool>();
      };
      const bool normalized = flag("normalized", !flag("special", false));
      // A normalized=true token is matched by what the normalizer makes of its content, and
      // `tokenizers` decodes it to that too.
      const std::string text = normalized && !normalizer_.empty() ? normalize(content) : content;
      if (text.empty())
        throw fail("added token ", t["content"].dump(), " normalizes to an empty string");
      (normalized ? normalized_added_ : raw_added_)
          .add(text, {static_cast<int32_t>(id), flag("lstrip", false), flag("rstrip", false),
                      flag("single_word", false)});
      added_[content] = static_cast<int32_t>(id);
      added_by_id_[static_cast<int32_t>(id)] = sp_style() ? text : ByteLevelBpe::token_bytes(text);
    }
  }

  // The normalizer at `key` (a Sequence is flattened), appended to normalizer_.
  template <typename Fail>
  void read_normalizer(const json& n, const std::string& key, Fail&& fail) {
    using Step = NormalizerStep;
    if (!n.is_object()) throw fail(key, " is not an object");
    const std::string type = type_of(n);
    normalizer_name_ = normalizer_name_.empty() ? type : normalizer_name_;
    auto text_at = [&](const json& obj, const char* field, const std::string& where) {
      const std::string* v = string_at(obj, field);
      if (v == nullptr) throw fail(where, ".", field, " is missing or not a string");
      if (uc::find_invalid_utf8(*v) != std::string::npos)
        throw fail(where, ".", field, " is not valid UTF-8");
      return uc::decode_utf8_lossy(*v);
    };
    static const std::map<std::string, Step::Kind> kPlain = {{"NFC", Step::kNfc},
                                                             {"NFD", Step::kNfd},
                                                             {"NFKC", Step::kNfkc},
                                                             {"NFKD", Step::kNfkd},
                                                             {"Lowercase", Step::kLowercase},
                                                             {"StripAccents", Step::kStripAccents}};
    if (const auto it = kPlain.find(type); it != kPlain.end()) {
      normalizer_.emplace_back(it->second);
    } else if (type == "Sequence") {
      const auto it_list = n.find("normalizers");
      if (it_list == n.end() || !it_list->is_array())
        throw fail(key, ".normalizers is missing or not a list");
      for (size_t i = 0; i < it_list->size(); ++i)
        read_normalizer((*it_list)[i], concat(key, ".normalizers[", i, "]"), fail);
    } else if (type == "Strip") {
      auto flag = [&](const char* field) {
        const auto f = n.find(field);
        if (f == n.end() || !f->is_boolean())
          throw fail(key, ".", field, " is missing or not true/false");
        return *f == true;
      };
      Step step(Step::kStrip);
      step.left = flag("strip_left");
      step.right = flag("strip_right");
      normalizer_.push_back(step);
    } else if (type == "Replace") {
      const auto pattern = n.find("pattern");
      if (pattern != n.end() && pattern->is_object() && pattern->contains("Regex"))
        throw fail(key, ".pattern: Replace with a Regex pattern ", (*pattern)["Regex"].dump(),
                   " is not supported (String patterns only)");
      if (pattern == n.end() || !pattern->is_object())
        throw fail(key, ".pattern is missing or not {\"String\": ...}");
      Step step(Step::kReplace);
      step.pattern = text_at(*pattern, "String", key + ".pattern");
      if (step.pattern.empty()) throw fail(key, ".pattern.String is empty");
      step.content = text_at(n, "content", key);
      normalizer_.push_back(std::move(step));
    } else if (type == "Prepend") {
      Step step(Step::kPrepend);
      step.content = text_at(n, "prepend", key);
      normalizer_.push_back(std::move(step));
    } else {
      throw fail("normalizer type '", type, "' (", key,
                 ") is not supported (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, "
                 "Replace with a String, Prepend, Sequence)");
    }
    // ASCII text passes the Unicode normalization forms and StripAccents unchanged.
    ascii_identity_ = std::all_of(normalizer_.begin(), normalizer_.end(), [](const Step& st) {
      return st.kind == Step::kNfc || st.kind == Step::kNfd || st.kind == Step::kNfkc ||
             st.kind == Step::kNfkd || st.kind == Step::kStripAccents;
    });
  }

  // The normalizer applied to `text` (valid UTF-8), as `tokenizers` applies it to one piece.
  std::string normalize(std::string_view text) const {
    using Step = NormalizerStep;
    if (ascii_identity_ &&
        std::none_of(text.begin(), text.end(), [](char c) { return (c & 0x80) != 0; }))
      return std::string(text);
    std::u32string s = uc::decode_utf8_lossy(text), out;
    for (const Step& step : normalizer_) {
      out.clear();
      switch (step.kind) {
        case Step::kNfc:
          uc::append_nfc(s, out);
          break;
        case Step::kNfd:
          uc::append_nfd(s, out);
          break;
        case Step::kNfkc:
          uc::append_nfkc(s, out);
          break;
        case Step::kNfkd:
          uc::append_nfkd(s, out);
          break;
        case Step::kLowercase:
          uc::append_lower_chars(s, out);
          break;
        case Step::kStripAccents:  // drops every mark (Mn, Mc, Me)
          for (char32_t c : s)
            if (!uc::is_mark(uc::general_category(c))) out.push_back(c);
          break;
        case Step::kStrip: {  // White_Space, as Rust's char::is_whitespace
          size_t b = 0, e = s.size();
          if (step.left)
            while (b < e && uc::is_white_space(s[b])) ++b;
          if (step.right)
            while (e > b && uc::is_white_space(s[e - 1])) --e;
          out.assign(s, b, e - b);
          break;
        }
        case Step::kReplace:  // every occurrence, left to right, not overlapping
          for (size_t i = 0; i < s.size();) {
            if (s.compare(i, step.pattern.size(), step.pattern) == 0) {
              out += step.content;
              i += step.pattern.size();
            } else {
              out.push_back(s[i++]);
            }
          }
          break;
        case Step::kPrepend:  // only to a non-empty piece
          if (!s.empty()) out = step.content + s;
          break;
      }
      s.swap(out);
    }
    return uc::to_utf8(s);
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
      if (it != added_.end()) bos_ = prompt_bos_ = it->second;
    }
  }

  // tokenizer_config.json as an object; empty when there is none.
  static json read_config_json(const fs::path& config) {
    std::error_code ec;
    if (!fs::is_regular_file(config, ec)) return json::object();
    json c = parse_json(config.string());
    return c.is_object() ? c : json::object();
  }

  // Its bos_token / eos_token (a string or {"content": ...}); "" when absent.
  static std::string config_token(const json& c, const char* key) {
    if (!c.contains(key)) return {};
    const json& e = c[key];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string())
      return e["content"].get<std::string>();
    return {};
  }

  // An explicit add_bos_token makes transformers rebuild the post-processor: the BOS in front
  // exactly when it is true (and the tokenizer has one).
  void read_config(const fs::path& path) {
    const json config = read_config_json(path);
    const std::string bos = config_token(config, "bos_token");
    if (const auto it = added_.find(bos); !bos.empty() && it != added_.end()) bos_ = it->second;
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      prompt_bos_ = config["add_bos_token"].get<bool>() ? bos_ : -1;
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
  std::unique_ptr<ByteLevelBpe> bpe_;     // byte-level BPE, or
  std::unique_ptr<CharBpe> char_bpe_;     // SentencePiece-style (sp_style())
  Metaspace metaspace_;                   // kMetaspace's settings
  LiteralSplit literal_split_;            // kLiteralSplit's
  SpDecoder sp_decoder_;                  // sp_style()'s decoder
  std::map<std::string, int32_t> added_;  // every added token, by content
  std::map<int32_t, std::string> added_by_id_;
  AddedSet raw_added_;         // normalized=false: matched in the raw text
  AddedSet normalized_added_;  // normalized=true: matched in the normalized pieces
  PreTokenizer pre_tokenizer_ = PreTokenizer::kGpt2;
  std::vector<NormalizerStep> normalizer_;  // empty: none
  std::string normalizer_name_;             // the top-level normalizer's type
  bool ascii_identity_ = false;             // normalizer_ leaves ASCII text alone
  int64_t vocab_ = 0;
  int32_t bos_ = -1, prompt_bos_ = -1, eos_ = -1;
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
