#include "data/tokenizer_unicode.h"

#include <algorithm>
#include <iterator>

#include "data/unicode_tables.h"

namespace megatron::data::unicode {

namespace tables = unicode_tables;

namespace {

// `table` holds sorted inclusive ranges as pairs (first, last).
template <size_t N>
bool in_ranges(const uint32_t (&table)[N], char32_t cp) {
  static_assert(N % 2 == 0);
  size_t lo = 0, hi = N / 2;  // ranges [lo, hi)
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (table[2 * mid + 1] < cp) {
      lo = mid + 1;
    } else if (table[2 * mid] > cp) {
      hi = mid;
    } else {
      return true;
    }
  }
  return false;
}

// Index of the run containing `cp` in a table of run starts packed as (first << shift) | value.
template <size_t N>
uint32_t run_value(const uint32_t (&table)[N], char32_t cp, unsigned shift, uint32_t fallback) {
  const uint32_t key = (static_cast<uint32_t>(cp) << shift) | ((1u << shift) - 1);
  const auto* it = std::upper_bound(std::begin(table), std::end(table), key);
  if (it == std::begin(table)) return fallback;
  return *(it - 1) & ((1u << shift) - 1);
}

bool is_case_ignorable(char32_t cp) { return in_ranges(tables::kCaseIgnorable, cp); }
bool is_cased_not_ignorable(char32_t cp) { return in_ranges(tables::kCasedNotIgnorable, cp); }

void append_lower_one(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  constexpr size_t n = std::size(tables::kLowerSingle) / 2;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (tables::kLowerSingle[2 * mid] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < n && tables::kLowerSingle[2 * lo] == cp) {
    out.push_back(tables::kLowerSingle[2 * lo + 1]);
    return;
  }
  for (const auto& sp : tables::kLowerSpecial) {
    if (sp.cp == cp) {
      out.append(sp.lower, sp.lower + sp.length);
      return;
    }
  }
  out.push_back(cp);
}

// Python's Final_Sigma test for the capital sigma at s[i]: a cased letter before it (skipping
// case-ignorable code points) and none after it (same skipping).
bool is_final_sigma(std::u32string_view s, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(s[j - 1])) --j;
  if (j == 0 || !is_cased_not_ignorable(s[j - 1])) return false;
  j = i + 1;
  while (j < s.size() && is_case_ignorable(s[j])) ++j;
  return j == s.size() || !is_cased_not_ignorable(s[j]);
}

constexpr char32_t kHangulBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr uint32_t kHangulVCount = 21, kHangulTCount = 28, kHangulCount = 11172;

// Index of `cp` in a table of pairs (cp, value) sorted by cp, or `n` (the pair count).
template <size_t N>
size_t find_pair(const uint32_t (&table)[N], char32_t cp) {
  constexpr size_t n = N / 2;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (table[2 * mid] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && table[2 * lo] == cp ? lo : n;
}

// The full canonical (or, with `compat`, compatibility) decomposition of one code point.
void append_decomposition(char32_t cp, bool compat, std::u32string& out) {
  // Nothing below U+00A0 decomposes; canonically nothing below U+00C0.
  if (cp < (compat ? 0xA0u : 0xC0u)) {
    out.push_back(cp);
    return;
  }
  if (cp >= kHangulBase && cp < kHangulBase + kHangulCount) {
    const uint32_t s = cp - kHangulBase;
    const uint32_t t = s % kHangulTCount;
    out.push_back(kHangulLBase + s / (kHangulVCount * kHangulTCount));
    out.push_back(kHangulVBase + (s % (kHangulVCount * kHangulTCount)) / kHangulTCount);
    if (t != 0) out.push_back(kHangulTBase + t);
    return;
  }
  if (compat) {  // kNfkd lists only where NFKD differs from NFD
    constexpr size_t n = std::size(tables::kNfkd) / 2;
    const size_t i = find_pair(tables::kNfkd, cp);
    if (i < n) {
      const uint32_t packed = tables::kNfkd[2 * i + 1];
      const uint32_t* d = tables::kNfkdData + (packed >> 5);
      out.append(d, d + (packed & 31u));
      return;
    }
  }
  constexpr size_t n = std::size(tables::kNfd) / 2;
  const size_t i = find_pair(tables::kNfd, cp);
  if (i < n) {
    const uint32_t packed = tables::kNfd[2 * i + 1];
    const uint32_t* d = tables::kNfdData + (packed >> 3);
    out.append(d, d + (packed & 7u));
    return;
  }
  out.push_back(cp);
}

// Decomposition of every code point, then the canonical ordering: stable-sort every run of
// non-starters by combining class.
void decompose(std::u32string_view s, bool compat, std::u32string& out) {
  const size_t begin = out.size();
  for (char32_t cp : s) append_decomposition(cp, compat, out);
  size_t i = begin;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                       out.begin() + static_cast<std::ptrdiff_t>(j), [](char32_t a, char32_t b) {
                         return combining_class(a) < combining_class(b);
                       });
    }
    i = j;
  }
}

}  // namespace

const char* unicode_version() { return tables::kUnicodeVersion; }

GeneralCategory general_category(char32_t cp) {
  if (cp > 0x10FFFF) return GeneralCategory::Cn;
  return static_cast<GeneralCategory>(run_value(tables::kGeneralCategory, cp, 5, 0));
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return in_ranges(tables::kWhiteSpace, cp);
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  return static_cast<uint8_t>(run_value(tables::kCombiningClass, cp, 8, 0));
}

void append_lower_chars(std::u32string_view s, std::u32string& out) {
  for (char32_t cp : s) append_lower_one(cp, out);
}

void append_lower(std::u32string_view s, std::u32string& out) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0x3A3) {
      out.push_back(is_final_sigma(s, i) ? 0x3C2 : 0x3C3);
    } else {
      append_lower_one(s[i], out);
    }
  }
}

void append_nfd(std::u32string_view s, std::u32string& out) { decompose(s, false, out); }
void append_nfkd(std::u32string_view s, std::u32string& out) { decompose(s, true, out); }

namespace {

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  // Hangul: L + V -> LV, LV + T -> LVT.
  if (a >= kHangulLBase && a < kHangulLBase + 19 && b >= kHangulVBase &&
      b < kHangulVBase + kHangulVCount)
    return kHangulBase + ((a - kHangulLBase) * kHangulVCount + (b - kHangulVBase)) * kHangulTCount;
  if (a >= kHangulBase && a < kHangulBase + kHangulCount &&
      (a - kHangulBase) % kHangulTCount == 0 && b > kHangulTBase &&
      b < kHangulTBase + kHangulTCount)
    return a + (b - kHangulTBase);
  constexpr size_t n = std::size(tables::kComposition) / 3;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const uint32_t* t = tables::kComposition + 3 * mid;
    if (t[0] < a || (t[0] == a && t[1] < b)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < n && tables::kComposition[3 * lo] == a && tables::kComposition[3 * lo + 1] == b)
    return tables::kComposition[3 * lo + 2];
  return 0;
}

// UAX #15's canonical composition of the decomposed `d`, appended to `out`.
void compose_into(const std::u32string& d, std::u32string& out) {
  if (d.empty()) return;
  const size_t base = out.size();
  // UAX #15's sample algorithm: a character composes with the last starter unless a character
  // between them has class 0 or a class >= its own (blocked).
  out.push_back(d[0]);
  size_t starter = base;
  int last_class =
      combining_class(d[0]) == 0 ? 0 : 256;  // a leading non-starter composes with nothing
  for (size_t i = 1; i < d.size(); ++i) {
    const char32_t c = d[i];
    const int cls = combining_class(c);
    const char32_t composite = last_class == 256 ? 0 : compose(out[starter], c);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      out[starter] = composite;
      continue;
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(c);
  }
}

}  // namespace

void append_nfc(std::u32string_view s, std::u32string& out) {
  std::u32string d;
  decompose(s, false, d);
  compose_into(d, out);
}

void append_nfkc(std::u32string_view s, std::u32string& out) {
  std::u32string d;
  decompose(s, true, d);
  compose_into(d, out);
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(cp, out);
  return out;
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Skip ASCII eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::copy(p + i, p + i + 8, reinterpret_cast<unsigned char*>(&w));
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    bool valid;
    const size_t len = decode_utf8(p + i, n - i, cp, valid);
    if (!valid) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view s) {
  size_t bad = find_invalid_utf8(s);
  if (bad == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, bad));
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = bad; i < s.size();) {
    char32_t cp;
    bool valid;
    const size_t len = decode_utf8(p + i, s.size() - i, cp, valid);
    if (valid) {
      out.append(s.data() + i, len);
    } else {
      append_utf8(kReplacement, out);
    }
    i += len;
  }
  return out;
}

std::u32string decode_utf8_lossy(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    bool valid;
    i += decode_utf8(p + i, s.size() - i, cp, valid);
    out.push_back(cp);
  }
  return out;
}

}  // namespace megatron::data::unicode
