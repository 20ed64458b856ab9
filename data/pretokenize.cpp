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

// The end of the whitespace alternatives shared by LLaMA-3's and tekken's patterns at i (a
// white-space code point): \s*[\r\n]+ (up to the run's last line break), else \s+(?!\S) (all
// but the run's last character when a non-space follows), else \s+.
size_t whitespace_end(const unsigned char* s, size_t n, size_t i) {
  size_t end = i, last_break = std::string_view::npos, last_start = i;
  while (end < n) {
    const CodePoint c = code_point(s, n, end);
    if (c.cls != CharClass::kSpace) break;
    if (c.cp == '\r' || c.cp == '\n') last_break = end;
    last_start = end;
    end += c.len;
  }
  if (last_break != std::string_view::npos) return last_break + 1;
  if (end < n && last_start != i) return last_start;
  return end;
}

}  // namespace

void llama3_pretokenize(std::string_view text, const Llama3Pattern& pattern,
                        const PretokenSink& f) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  // Qwen3.5's words are [\p{L}\p{M}]+ and its punctuation excludes \p{M}: marks count as letters.
  auto at = [&](size_t j) {
    CodePoint c = code_point(s, n, j);
    if (pattern.marks_in_words && c.cls == CharClass::kOther && c.cp >= 0x80 &&
        uc::is_mark(uc::general_category(c.cp)))
      c.cls = CharClass::kLetter;
    return c;
  };
  auto run_of = [&](size_t j, CharClass cls) {  // end of the run of `cls` starting at j
    while (j < n) {
      const CodePoint c = at(j);
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
    const CodePoint c0 = at(i);
    // [^\r\n\p{L}\p{N}]?\p{L}+ (Qwen3.5: [\p{L}\p{M}]+)
    if (c0.cls == CharClass::kLetter) {
      const size_t j = run_of(i, CharClass::kLetter);
      f(i, j);
      i = j;
      continue;
    }
    if (c0.cp != '\r' && c0.cp != '\n' && c0.cls != CharClass::kNumber && i + c0.len < n &&
        at(i + c0.len).cls == CharClass::kLetter) {
      const size_t j = run_of(i + c0.len, CharClass::kLetter);
      f(i, j);
      i = j;
      continue;
    }
    // \p{N}{1,max_digits}
    if (c0.cls == CharClass::kNumber) {
      size_t j = i;
      for (int k = 0; k < pattern.max_digits && j < n; ++k) {
        const CodePoint c = at(j);
        if (c.cls != CharClass::kNumber) break;
        j += c.len;
      }
      f(i, j);
      i = j;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t k = c0.cp == ' ' && i + 1 < n ? i + 1 : i;
    if (at(k).cls == CharClass::kOther) {
      size_t j = run_of(k, CharClass::kOther);
      while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
      f(i, j);
      i = j;
      continue;
    }
    const size_t end = whitespace_end(s, n, i);
    f(i, end);
    i = end;
  }
}

namespace {

// The classes of tekken's pattern a code point belongs to.
enum TekkenBits : uint8_t {
  kUpperish = 1,  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLowerish = 2,  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  kL = 4,         // \p{L}
  kN = 8,         // \p{N}
  kS = 16,        // \s
  kO = 32,        // [^\s\p{L}\p{N}]
};

uint8_t tekken_bits(char32_t cp) {
  using GC = uc::GeneralCategory;
  const GC gc = uc::general_category(cp);
  switch (gc) {
    case GC::Lu:
    case GC::Lt:
      return kUpperish | kL;
    case GC::Ll:
      return kLowerish | kL;
    case GC::Lm:
    case GC::Lo:
      return kUpperish | kLowerish | kL;
    default:
      break;
  }
  if (uc::is_mark(gc)) return kUpperish | kLowerish | kO;  // marks are not \p{L}
  if (uc::is_number(gc)) return kN;
  return uc::is_white_space(cp) ? kS : kO;
}

struct TekkenAscii {
  std::array<uint8_t, 128> bits{};
  TekkenAscii() {
    for (char32_t c = 0; c < 128; ++c) bits[c] = tekken_bits(c);
  }
};

const TekkenAscii kTekkenAscii;

struct TekkenChar {
  size_t len;
  char32_t cp;
  uint8_t bits;
};

TekkenChar tekken_char(const unsigned char* s, size_t n, size_t i) {
  if (s[i] < 0x80) return {1, s[i], kTekkenAscii.bits[s[i]]};
  char32_t cp;
  bool valid;
  const size_t len = uc::decode_utf8(s + i, n - i, cp, valid);
  return {len, cp, tekken_bits(cp)};
}

}  // namespace

void tekken_pretokenize(std::string_view text, const PretokenSink& f) {
  constexpr size_t npos = std::string_view::npos;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto run_of = [&](size_t j, uint8_t bits) {  // end of the run of code points in `bits`
    while (j < n) {
      const TekkenChar c = tekken_char(s, n, j);
      if ((c.bits & bits) == 0) break;
      j += c.len;
    }
    return j;
  };
  // [Upperish]*[Lowerish]+ from j (the end, or npos). The greedy star takes the whole
  // Upperish run; when no Lowerish follows it, backtracking gives back code points until the
  // last one that is both (Lm, Lo, M), which then is the one-character [Lowerish]+.
  auto upper_then_lower = [&](size_t j) {
    size_t k = j, last_both_end = npos;
    while (k < n) {
      const TekkenChar c = tekken_char(s, n, k);
      if ((c.bits & kUpperish) == 0) break;
      k += c.len;
      if (c.bits & kLowerish) last_both_end = k;
    }
    if (k < n && (tekken_char(s, n, k).bits & kLowerish)) return run_of(k, kLowerish);
    return last_both_end;
  };
  size_t i = 0;
  while (i < n) {
    const TekkenChar c0 = tekken_char(s, n, i);
    const size_t next = i + c0.len;
    // [^\r\n\p{L}\p{N}]? is tried with the code point first, then without it.
    const bool optional_first = (c0.bits & (kL | kN)) == 0 && c0.cp != '\r' && c0.cp != '\n';
    size_t end = npos;
    // Alternative 1: [^\r\n\p{L}\p{N}]?[Upperish]*[Lowerish]+
    if (optional_first) end = upper_then_lower(next);
    if (end == npos) end = upper_then_lower(i);
    // Alternative 2: [^\r\n\p{L}\p{N}]?[Upperish]+[Lowerish]* (nothing to backtrack).
    if (end == npos) {
      size_t j = npos;
      if (optional_first && next < n && (tekken_char(s, n, next).bits & kUpperish)) {
        j = next;
      } else if (c0.bits & kUpperish) {
        j = i;
      }
      if (j != npos) end = run_of(run_of(j, kUpperish), kLowerish);
    }
    // Alternative 3: \p{N}
    if (end == npos && (c0.bits & kN)) end = next;
    // Alternative 4:  ?[^\s\p{L}\p{N}]+[\r\n/]*
    if (end == npos) {
      size_t j = npos;
      if (c0.cp == ' ' && next < n && (tekken_char(s, n, next).bits & kO)) {
        j = next;
      } else if (c0.bits & kO) {
        j = i;
      }
      if (j != npos) {
        end = run_of(j, kO);
        while (end < n && (s[end] == '\r' || s[end] == '\n' || s[end] == '/')) ++end;
      }
    }
    // The whitespace alternatives; every code point left here is white space.
    if (end == npos) end = c0.bits & kS ? whitespace_end(s, n, i) : next;
    f(i, end);
    i = end;
  }
}

}  // namespace megatron::data
