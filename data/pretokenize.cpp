#include "data/pretokenize.h"

#include <array>
#include <cstdint>

#include "data/tokenizer_unicode.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

// Character classes of the pre-tokenizer.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

struct AsciiClasses {
  std::array<CharClass, 128> c{};
  AsciiClasses() {
    for (int i = 0; i < 128; ++i) {
      if ((i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z')) {
        c[i] = CharClass::kLetter;
      } else if (i >= '0' && i <= '9') {
        c[i] = CharClass::kNumber;
      } else if (i == ' ' || (i >= 0x09 && i <= 0x0D)) {
        c[i] = CharClass::kSpace;
      } else {
        c[i] = CharClass::kOther;
      }
    }
  }
};

const AsciiClasses kAscii;

inline CharClass char_class(char32_t cp) {
  if (cp < 0x80) return kAscii.c[cp];
  const auto gc = uc::general_category(cp);
  if (uc::is_letter(gc)) return CharClass::kLetter;
  if (uc::is_number(gc)) return CharClass::kNumber;
  if (uc::is_white_space(cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

}  // namespace

void gpt2_pretokenize(std::string_view text, const PretokenSink& f) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto at = [&](size_t i, CharClass& cls) -> size_t {  // length of the code point at i
    if (s[i] < 0x80) {
      cls = kAscii.c[s[i]];
      return 1;
    }
    char32_t cp;
    bool valid;
    const size_t len = uc::decode_utf8(s + i, n - i, cp, valid);
    cls = char_class(cp);
    return len;
  };
  size_t i = 0;
  while (i < n) {
    // The contractions (case-sensitive, tried first).
    if (s[i] == '\'' && i + 1 < n) {
      const unsigned char a = s[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        f(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const unsigned char b = s[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          f(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    CharClass cls;
    size_t j = i + at(i, cls);
    // " ?X+": a single U+0020 joins the run of letters / digits / others right after it.
    if (s[i] == ' ' && j < n) {
      CharClass next;
      const size_t len = at(j, next);
      if (next != CharClass::kSpace) {
        cls = next;
        j += len;
      }
    }
    if (cls != CharClass::kSpace) {
      while (j < n) {
        CharClass c;
        const size_t len = at(j, c);
        if (c != cls) break;
        j += len;
      }
      f(i, j);
      i = j;
      continue;
    }
    // Whitespace: "\s+(?!\S)" takes the run up to (not including) its last character when a
    // non-space follows and the run has two or more characters; otherwise "\s+" / the whole
    // run at the end of the text.
    size_t last = i;
    while (j < n) {
      CharClass c;
      const size_t len = at(j, c);
      if (c != CharClass::kSpace) break;
      last = j;
      j += len;
    }
    if (j < n && last != i) j = last;
    f(i, j);
    i = j;
  }
}

namespace {

// The code point at byte i: its length, value and class.
struct CodePoint {
  size_t len;
  char32_t cp;
  CharClass cls;
};
CodePoint code_point(const unsigned char* s, size_t n, size_t i) {
  if (s[i] < 0x80) return {1, s[i], kAscii.c[s[i]]};
  char32_t cp;
  bool valid;
  const size_t len = uc::decode_utf8(s + i, n - i, cp, valid);
  return {len, cp, char_class(cp)};
}

char ascii_lower(unsigned char c) {
  return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

}  // namespace

void llama3_pretokenize(std::string_view text, int max_digits, const PretokenSink& f) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto run_of = [&](size_t j, CharClass cls) {  // end of the run of `cls` starting at j
    while (j < n) {
      const CodePoint c = code_point(s, n, j);
      if (c.cls != cls) break;
      j += c.len;
    }
    return j;
  };
  size_t i = 0;
  while (i < n) {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (s[i] == '\'' && i + 1 < n) {
      const char a = ascii_lower(s[i + 1]);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        f(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const char b = ascii_lower(s[i + 2]);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          f(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    const CodePoint c0 = code_point(s, n, i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0.cls == CharClass::kLetter) {
      const size_t j = run_of(i, CharClass::kLetter);
      f(i, j);
      i = j;
      continue;
    }
    if (c0.cp != '\r' && c0.cp != '\n' && c0.cls != CharClass::kNumber && i + c0.len < n &&
        code_point(s, n, i + c0.len).cls == CharClass::kLetter) {
      const size_t j = run_of(i + c0.len, CharClass::kLetter);
      f(i, j);
      i = j;
      continue;
    }
    // \p{N}{1,max_digits}
    if (c0.cls == CharClass::kNumber) {
      size_t j = i;
      for (int k = 0; k < max_digits && j < n; ++k) {
        const CodePoint c = code_point(s, n, j);
        if (c.cls != CharClass::kNumber) break;
        j += c.len;
      }
      f(i, j);
      i = j;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t k = c0.cp == ' ' && i + 1 < n ? i + 1 : i;
    if (code_point(s, n, k).cls == CharClass::kOther) {
      size_t j = run_of(k, CharClass::kOther);
      while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
      f(i, j);
      i = j;
      continue;
    }
    // Whitespace: \s*[\r\n]+ (up to the run's last line break), else \s+(?!\S) (all but
    // the run's last character when a non-space follows), else \s+.
    size_t end = i, last_break = std::string_view::npos, last_start = i;
    while (end < n) {
      const CodePoint c = code_point(s, n, end);
      if (c.cls != CharClass::kSpace) break;
      if (c.cp == '\r' || c.cp == '\n') last_break = end;
      last_start = end;
      end += c.len;
    }
    if (last_break != std::string_view::npos) {
      end = last_break + 1;
    } else if (end < n && last_start != i) {
      end = last_start;
    }
    f(i, end);
    i = end;
  }
}

}  // namespace megatron::data
