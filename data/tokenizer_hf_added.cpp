#include "data/tokenizer_hf_added.h"

#include "data/tokenizer_unicode.h"

namespace megatron::data {

namespace uc = unicode;

namespace {
// The code point ending at byte `end` of text (not starting before `floor`; its first byte in
// *start) and the one starting at `begin` (its end in *end); kNoCodePoint for a byte sequence
// that is not one valid code point. Callers keep floor < end and begin < text.size().
constexpr char32_t kNoCodePoint = 0xFFFFFFFF;
char32_t code_point_before(std::string_view text, size_t floor, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > floor && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  *start = b;
  const std::u32string cp = uc::decode_utf8_lossy(text.substr(b, end - b));
  return cp.size() == 1 ? cp[0] : kNoCodePoint;
}
char32_t code_point_at(std::string_view text, size_t begin, size_t* end) {
  size_t e = begin + 1;
  while (e < text.size() && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) ++e;
  *end = e;
  const std::u32string cp = uc::decode_utf8_lossy(text.substr(begin, e - begin));
  return cp.size() == 1 ? cp[0] : kNoCodePoint;
}

// Rust regex's \w (what `tokenizers` tests single_word tokens' neighbours with): Alphabetic
// (letters, letter numbers, and the enclosed letters of Other_Alphabetic; its marks are marks),
// marks, decimal digits, connector punctuation and the joiners U+200C/U+200D.
bool is_word_char(char32_t cp) {
  using uc::GeneralCategory;
  const GeneralCategory g = uc::general_category(cp);
  if (uc::is_letter(g) || uc::is_mark(g) || g == GeneralCategory::Nd || g == GeneralCategory::Nl ||
      g == GeneralCategory::Pc)
    return true;
  return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) ||
         (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
         (cp >= 0x1F170 && cp <= 0x1F189);
}

}  // namespace

size_t whitespace_before(std::string_view text, size_t floor, size_t end) {
  size_t at = end, b = 0;
  while (at > floor) {
    const char32_t cp = code_point_before(text, floor, at, &b);
    if (cp == kNoCodePoint || !uc::is_white_space(cp)) break;
    at = b;
  }
  return end - at;
}
size_t whitespace_after(std::string_view text, size_t begin) {
  size_t at = begin, e = 0;
  while (at < text.size()) {
    const char32_t cp = code_point_at(text, at, &e);
    if (cp == kNoCodePoint || !uc::is_white_space(cp)) break;
    at = e;
  }
  return at - begin;
}

bool word_char_before(std::string_view text, size_t end) {
  size_t start = 0;
  if (end == 0) return false;
  const char32_t cp = code_point_before(text, 0, end, &start);
  return cp != kNoCodePoint && is_word_char(cp);
}
bool word_char_after(std::string_view text, size_t begin) {
  size_t end = 0;
  if (begin >= text.size()) return false;
  const char32_t cp = code_point_at(text, begin, &end);
  return cp != kNoCodePoint && is_word_char(cp);
}

}  // namespace megatron::data
