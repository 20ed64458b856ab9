// BertWordPieceTokenizer: BERT's BasicTokenizer + WordPiece from a vocab.txt, following
// Megatron's bert_tokenization.FullTokenizer (the original google-research BERT code with
// max_input_chars_per_word = 200).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "data/tokenizer.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

constexpr size_t kMaxCharsPerWord = 200;  // Megatron's WordpieceTokenizer default

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// BERT's _is_whitespace: space, \t, \n, \r and category Zs.
bool is_bert_whitespace(char32_t cp) {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  return cp >= 0x80 && uc::general_category(cp) == uc::GeneralCategory::Zs;
}

// BERT's _is_control: categories Cc and Cf, except \t, \n, \r.
bool is_bert_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
  const auto gc = uc::general_category(cp);
  return gc == uc::GeneralCategory::Cc || gc == uc::GeneralCategory::Cf;
}

// BERT's _is_punctuation: every non-alphanumeric printable ASCII character, and categories P*.
bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  return cp >= 0x80 && uc::is_punctuation(uc::general_category(cp));
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks (and compatibility ideographs).
bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Python's str.strip() (no arguments) of UTF-8 text.
std::string_view python_strip(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t b = 0, e = s.size();
  while (b < e) {
    char32_t cp;
    bool valid;
    const size_t len = uc::decode_utf8(p + b, e - b, cp, valid);
    if (!valid || !uc::is_python_space(cp)) break;
    b += len;
  }
  while (e > b) {
    size_t k = e - 1;
    while (k > b && (p[k] & 0xC0) == 0x80) --k;
    char32_t cp;
    bool valid;
    uc::decode_utf8(p + k, e - k, cp, valid);
    if (!valid || !uc::is_python_space(cp)) break;
    e = k;
  }
  return s.substr(b, e - b);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// Splits `s` at Python whitespace (str.split()), calling f for each non-empty part.
template <typename F>
void split_python_space(std::u32string_view s, F&& f) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && uc::is_python_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !uc::is_python_space(s[j])) ++j;
    if (j > i) f(s.substr(i, j - i));
    i = j;
  }
}

}  // namespace

struct BertWordPieceTokenizer::Impl {
  std::string vocab_file;
  bool lower_case = true;
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;
  int32_t cls = -1, sep = -1, mask = -1, pad = -1, unk = -1;

  void load();
  std::vector<std::u32string> basic_tokenize(std::string_view text) const;
  // Appends the wordpieces of one word (as ids, and as strings when `pieces` is set).
  void wordpiece(std::u32string_view word, std::vector<int32_t>& out,
                 std::vector<std::string>* pieces) const;
  void tokenize(std::string_view text, std::vector<int32_t>& out,
                std::vector<std::string>* pieces) const {
    for (const auto& word : basic_tokenize(text)) wordpiece(word, out, pieces);
  }
};

void BertWordPieceTokenizer::Impl::load() {
  MT_INPUT_CHECK(!vocab_file.empty(),
                 "BertWordPiece tokenizers need a vocab file (--vocab-file), but none was given");
  MT_INPUT_CHECK(std::filesystem::is_regular_file(vocab_file), "BERT vocab file '", vocab_file,
                 "' does not exist or is not a regular file");
  std::ifstream in(vocab_file, std::ios::binary);
  MT_INPUT_CHECK(in.is_open(), "cannot open BERT vocab file '", vocab_file, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  MT_INPUT_CHECK(!in.bad(), "read error on BERT vocab file '", vocab_file, "'");
  const std::string text = ss.str();
  // One token per line (\n, \r\n or \r: Python's universal newlines), stripped of whitespace;
  // the id is the line index.
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find_first_of("\r\n", pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (end < text.size() && text[end] == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
    ++line_no;
    const size_t bad = uc::find_invalid_utf8(line);
    MT_INPUT_CHECK(bad == std::string_view::npos, "BERT vocab file '", vocab_file, "' line ",
                   line_no, ": not valid UTF-8 (byte ", bad + 1, " of the line)");
    const std::string token(python_strip(line));
    const auto [it, inserted] = ids.emplace(token, static_cast<int32_t>(tokens.size()));
    MT_INPUT_CHECK(inserted, "BERT vocab file '", vocab_file, "' line ", line_no, ": token '",
                   token, "' already appeared on line ", it->second + 1);
    tokens.push_back(token);
  }
  MT_INPUT_CHECK(!tokens.empty(), "BERT vocab file '", vocab_file, "' is empty");
  auto special = [&](const char* name) {
    const auto it = ids.find(std::string_view(name));
    MT_INPUT_CHECK(it != ids.end(), "BERT vocab file '", vocab_file, "' has no ", name, " token");
    return it->second;
  };
  cls = special("[CLS]");
  sep = special("[SEP]");
  mask = special("[MASK]");
  pad = special("[PAD]");
  unk = special("[UNK]");
}

std::vector<std::u32string> BertWordPieceTokenizer::Impl::basic_tokenize(
    std::string_view text) const {
  // _clean_text (drop NUL, U+FFFD and control characters, whitespace -> ' ') and
  // _tokenize_chinese_chars (spaces around CJK ideographs). Ill-formed UTF-8 decodes to U+FFFD
  // and is dropped here, like the reference's decode("utf-8", "ignore").
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (char32_t cp : uc::decode_utf8_lossy(text)) {
    if (cp == 0 || cp == uc::kReplacement || is_bert_control(cp)) continue;
    if (is_bert_whitespace(cp)) {
      cleaned.push_back(' ');
    } else if (is_cjk(cp)) {
      cleaned.push_back(' ');
      cleaned.push_back(cp);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(cp);
    }
  }
  std::vector<std::u32string> out;
  std::u32string lowered, decomposed, stripped;
  split_python_space(cleaned, [&](std::u32string_view word) {
    if (lower_case) {
      lowered.clear();
      uc::append_lower(word, lowered);
      decomposed.clear();
      uc::append_nfd(lowered, decomposed);
      stripped.clear();
      for (char32_t cp : decomposed)
        if (cp < 0x300 || uc::general_category(cp) != uc::GeneralCategory::Mn)
          stripped.push_back(cp);
      word = stripped;
    }
    // _run_split_on_punc, then the final whitespace_tokenize of the joined pieces.
    auto emit = [&](std::u32string_view piece) {
      split_python_space(piece, [&](std::u32string_view p) { out.emplace_back(p); });
    };
    size_t start = 0;
    for (size_t i = 0; i < word.size(); ++i) {
      if (!is_bert_punctuation(word[i])) continue;
      if (i > start) emit(word.substr(start, i - start));
      emit(word.substr(i, 1));
      start = i + 1;
    }
    if (start < word.size()) emit(word.substr(start));
  });
  return out;
}

void BertWordPieceTokenizer::Impl::wordpiece(std::u32string_view word, std::vector<int32_t>& out,
                                             std::vector<std::string>* pieces) const {
  auto emit_unk = [&] {
    out.push_back(unk);
    if (pieces) pieces->push_back(tokens[unk]);
  };
  if (word.size() > kMaxCharsPerWord) {
    emit_unk();
    return;
  }
  std::string utf8;
  std::vector<size_t> offset{0};
  for (char32_t cp : word) {
    uc::append_utf8(cp, utf8);
    offset.push_back(utf8.size());
  }
  const size_t first_out = out.size();
  const size_t first_piece = pieces ? pieces->size() : 0;
  std::string key;
  for (size_t start = 0; start < word.size();) {
    int32_t found = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      key.assign(start > 0 ? "##" : "");
      key.append(utf8, offset[start], offset[end] - offset[start]);
      const auto it = ids.find(std::string_view(key));
      if (it != ids.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // no piece matches: the whole word is [UNK]
      out.resize(first_out);
      if (pieces) pieces->resize(first_piece);
      emit_unk();
      return;
    }
    out.push_back(found);
    if (pieces) pieces->push_back(key);
    start = end;
  }
}

BertWordPieceTokenizer::BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case)
    : impl_(std::make_unique<Impl>()) {
  impl_->vocab_file = vocab_file;
  impl_->lower_case = lower_case;
  impl_->load();
}

BertWordPieceTokenizer::~BertWordPieceTokenizer() = default;

std::vector<int32_t> BertWordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  impl_->tokenize(text, ids, nullptr);
  return ids;
}

std::vector<std::string> BertWordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  impl_->tokenize(text, ids, &pieces);
  return pieces;
}

const std::string& BertWordPieceTokenizer::id_to_token(int32_t id) const {
  MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->tokens.size(), "BertWordPiece(",
                 impl_->vocab_file, "): token id ", id, " is out of range (vocab ",
                 impl_->tokens.size(), ")");
  return impl_->tokens[id];
}

std::string BertWordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  // Megatron's convert_tokens_to_string with clean_up_tokenization_spaces.
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += id_to_token(ids[i]);
  }
  replace_all(text, " ##", "");
  text = std::string(python_strip(text));
  static constexpr std::pair<std::string_view, std::string_view> kCleanups[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kCleanups) replace_all(text, from, to);
  return text;
}

int64_t BertWordPieceTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}
int32_t BertWordPieceTokenizer::pad() const { return impl_->pad; }
int32_t BertWordPieceTokenizer::cls() const { return impl_->cls; }
int32_t BertWordPieceTokenizer::sep() const { return impl_->sep; }
int32_t BertWordPieceTokenizer::mask() const { return impl_->mask; }
int32_t BertWordPieceTokenizer::unk() const { return impl_->unk; }

std::string BertWordPieceTokenizer::describe() const {
  return concat(impl_->lower_case ? "BertWordPieceLowerCase(" : "BertWordPieceCase(",
                impl_->vocab_file, ", vocab ", vocab_size(), ", eod = [SEP] ", sep(), ")");
}

}  // namespace megatron::data
