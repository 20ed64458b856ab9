// GPT2BPETokenizer: GPT-2's byte-level BPE (vocab.json + merges.txt).
//
// encode = pre-tokenize (GPT-2's regex, by hand) -> map each pre-token's UTF-8 bytes to byte
// symbols -> apply BPE merges by rank -> vocabulary ids. BPE runs on ids: every merge (a, b)
// is stored as (id(a), id(b)) -> (rank, id(a + b)), which is equivalent to the reference's
// string symbols because vocabulary strings and ids are in one-to-one correspondence.
#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "data/tokenizer.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

std::string read_whole_file(const std::string& path, const char* what) {
  MT_INPUT_CHECK(!path.empty(), "GPT2BPETokenizer needs a ", what, " but none was given");
  MT_INPUT_CHECK(std::filesystem::is_regular_file(path), "GPT-2 ", what, " '", path,
                 "' does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  MT_INPUT_CHECK(in.is_open(), "cannot open GPT-2 ", what, " '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  MT_INPUT_CHECK(!in.bad(), "read error on GPT-2 ", what, " '", path, "'");
  return ss.str();
}

// GPT-2's bytes_to_unicode(): the printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC,
// U+00AE..U+00FF) stand for themselves, the other 68 bytes for U+0100.. in byte order.
struct ByteAlphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // code point -> byte, -1 when not in the alphabet
  ByteAlphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

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

// Calls f(begin, end) for every match of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over valid UTF-8 `text`, in order; the matches tile the text.
template <typename F>
void for_each_pretoken(std::string_view text, F&& f) {
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

struct MergeInfo {
  int32_t rank;
  int32_t result;
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

constexpr size_t kCacheShards = 64;
constexpr size_t kCacheShardCapacity = 1 << 13;  // entries per shard before it is cleared
constexpr size_t kMaxCachedBytes = 96;           // longer pre-tokens are not cached
constexpr size_t kHeapBpeMinSymbols = 48;        // the heap BPE for pre-tokens this long

}  // namespace

struct GPT2BPETokenizer::Impl {
  std::string vocab_file, merge_file;
  std::vector<std::string> id_bytes;  // id -> the bytes it decodes to
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<uint64_t, MergeInfo> merges;
  bool heap_ok = true;  // merges ranked consistently: the heap BPE equals the reference
  int32_t eod = -1;

  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kCacheShards> cache;

  void load_vocab();
  void load_merges();
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_heap(std::vector<int32_t>& word) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  std::unordered_map<std::string, int32_t> token_ids;  // vocab.json key -> id (loading only)
};

void GPT2BPETokenizer::Impl::load_vocab() {
  const std::string text = read_whole_file(vocab_file, "vocab file (vocab.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
    throw InputError(concat("GPT-2 vocab file '", vocab_file, "' is not valid JSON: ", e.what()));
  }
  MT_INPUT_CHECK(j.is_object(), "GPT-2 vocab file '", vocab_file,
                 "' must be a JSON object mapping tokens to ids, got ", j.type_name());
  MT_INPUT_CHECK(!j.empty(), "GPT-2 vocab file '", vocab_file, "' is empty");
  const auto& alphabet = byte_alphabet();
  const size_t n = j.size();
  id_bytes.assign(n, {});
  std::vector<bool> seen(n, false);
  for (const auto& [key, value] : j.items()) {
    MT_INPUT_CHECK(value.is_number_integer(), "GPT-2 vocab file '", vocab_file, "': token '", key,
                   "' has a non-integer id (", value.dump(), ")");
    const int64_t id = value.get<int64_t>();
    MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < n, "GPT-2 vocab file '", vocab_file,
                   "': token '", key, "' has id ", id, ", outside 0..", n - 1,
                   " (ids must number the ", n, " tokens from 0)");
    MT_INPUT_CHECK(!seen[id], "GPT-2 vocab file '", vocab_file, "': id ", id,
                   " is used by more than one token (one is '", key, "')");
    seen[id] = true;
    MT_INPUT_CHECK(uc::find_invalid_utf8(key) == std::string_view::npos, "GPT-2 vocab file '",
                   vocab_file, "': token with id ", id, " is not valid UTF-8");
    // Byte-level tokens decode to their bytes; any other (an added special token) to its text.
    std::string bytes;
    bool byte_level = true;
    for (char32_t cp : uc::decode_utf8_lossy(key)) {
      if (cp >= alphabet.to_byte.size() || alphabet.to_byte[cp] < 0) {
        byte_level = false;
        break;
      }
      bytes.push_back(static_cast<char>(alphabet.to_byte[cp]));
    }
    id_bytes[id] = byte_level ? bytes : key;
    token_ids.emplace(key, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    uc::append_utf8(alphabet.to_char[b], key);
    const auto it = token_ids.find(key);
    MT_INPUT_CHECK(it != token_ids.end(), "GPT-2 vocab file '", vocab_file,
                   "' lacks the single-byte token '", key, "' (byte ", b,
                   "): a byte-level vocabulary has all 256");
    byte_id[b] = it->second;
  }
  const auto it = token_ids.find(std::string(kEodPiece));
  MT_INPUT_CHECK(it != token_ids.end(), "GPT-2 vocab file '", vocab_file, "' has no '", kEodPiece,
                 "' token (the end-of-document id)");
  eod = it->second;
}

void GPT2BPETokenizer::Impl::load_merges() {
  const std::string text = read_whole_file(merge_file, "merges file (merges.txt)");
  MT_INPUT_CHECK(uc::find_invalid_utf8(text) == std::string_view::npos, "GPT-2 merges file '",
                 merge_file, "' is not valid UTF-8 (at byte ", uc::find_invalid_utf8(text), ")");
  merges.reserve(text.size() / 10);
  int32_t rank = 0;
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
    MT_INPUT_CHECK(parts.size() == 2, "GPT-2 merges file '", merge_file, "' line ", line_no,
                   ": expected two space-separated tokens, got ", parts.size(), " ('", line, "')");
    auto id_of = [&](const std::string& tok, const char* what) {
      const auto it = token_ids.find(tok);
      MT_INPUT_CHECK(it != token_ids.end(), "GPT-2 merges file '", merge_file, "' line ", line_no,
                     ": ", what, " '", tok, "' is not in the vocab file '", vocab_file, "'");
      return it->second;
    };
    const int32_t a = id_of(std::string(parts[0]), "token");
    const int32_t b = id_of(std::string(parts[1]), "token");
    const int32_t c = id_of(std::string(parts[0]) + std::string(parts[1]), "merged token");
    merges[pair_key(a, b)] = MergeInfo{rank, c};  // a repeated pair keeps its last rank
    MT_INPUT_CHECK(rank < INT32_MAX, "GPT-2 merges file '", merge_file, "' has too many merges");
    ++rank;
  }
  // Without merges every word falls apart into bytes: silently useless ids, not a tokenizer.
  MT_INPUT_CHECK(rank > 0, "GPT-2 merges file '", merge_file,
                 "' has no merges (empty, or only a #version line)");
  // The heap BPE processes merges in rank order pair by pair; it equals the reference's
  // "merge every occurrence of the best pair" when a merge's parts are only ever produced by
  // lower-ranked merges (true for GPT-2's files). Otherwise use the reference algorithm only.
  std::unordered_map<int32_t, int32_t> last_made;
  for (const auto& [key, m] : merges) {
    auto [it, inserted] = last_made.emplace(m.result, m.rank);
    if (!inserted) it->second = std::max(it->second, m.rank);
  }
  for (const auto& [key, m] : merges) {
    for (int32_t part :
         {static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu)}) {
      const auto it = last_made.find(part);
      if (it != last_made.end() && it->second >= m.rank) heap_ok = false;
    }
  }
}

// The reference algorithm: repeatedly take the adjacent pair of lowest rank and merge all of its
// occurrences left to right; the heap variant for long pre-tokens.
void GPT2BPETokenizer::Impl::bpe(std::string_view word_bytes, std::vector<int32_t>& out) const {
  std::vector<int32_t> word(word_bytes.size());
  for (size_t i = 0; i < word_bytes.size(); ++i)
    word[i] = byte_id[static_cast<unsigned char>(word_bytes[i])];
  if (heap_ok && word.size() >= kHeapBpeMinSymbols) {
    bpe_heap(word);
  } else {
    std::vector<int32_t> next;
    while (word.size() > 1) {
      int32_t best_rank = INT32_MAX, first = 0, second = 0, result = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = merges.find(pair_key(word[i], word[i + 1]));
        if (it != merges.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          first = word[i];
          second = word[i + 1];
          result = it->second.result;
        }
      }
      if (best_rank == INT32_MAX) break;
      next.clear();
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          next.push_back(result);
          i += 2;
        } else {
          next.push_back(word[i++]);
        }
      }
      word.swap(next);
    }
  }
  out.insert(out.end(), word.begin(), word.end());
}

void GPT2BPETokenizer::Impl::bpe_heap(std::vector<int32_t>& word) const {
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges.find(pair_key(word[pos], word[next[pos]]));
    if (it != merges.end())
      heap.push({it->second.rank, pos, word[pos], word[next[pos]], it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t q = next[c.pos];
    if (!alive[c.pos] || q < 0 || word[c.pos] != c.left || word[q] != c.right) continue;  // stale
    word[c.pos] = c.result;
    alive[q] = false;
    next[c.pos] = next[q];
    if (next[q] >= 0) prev[next[q]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t k = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i]) word[k++] = word[i];
  word.resize(k);
}

void GPT2BPETokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedBytes) {
    bpe(word, out);
    return;
  }
  const size_t h = StringHash{}(word);
  Shard& shard = cache[(h * 0x9E3779B97F4A7C15ull) >> 58];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : impl_(std::make_unique<Impl>()) {
  static_assert(kCacheShards == 64, "the shard index takes the top 6 bits of the hash");
  impl_->vocab_file = vocab_file;
  impl_->merge_file = merge_file;
  impl_->load_vocab();
  impl_->load_merges();
  impl_->token_ids.clear();
  impl_->token_ids.rehash(0);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::vector<std::string_view> GPT2BPETokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  for_each_pretoken(text, [&](size_t b, size_t e) { out.push_back(text.substr(b, e - b)); });
  return out;
}

std::vector<int32_t> GPT2BPETokenizer::encode(std::string_view text) const {
  std::string replaced;
  if (uc::find_invalid_utf8(text) != std::string_view::npos) {
    replaced = uc::replace_invalid_utf8(text);
    text = replaced;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for_each_pretoken(text,
                    [&](size_t b, size_t e) { impl_->encode_word(text.substr(b, e - b), ids); });
  return ids;
}

std::string GPT2BPETokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->id_bytes.size(), "GPT2BPETokenizer(",
                   impl_->vocab_file, "): token id ", id, " is out of range (vocab ",
                   impl_->id_bytes.size(), ")");
    bytes += impl_->id_bytes[id];
  }
  return uc::replace_invalid_utf8(bytes);
}

int64_t GPT2BPETokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_bytes.size());
}
int32_t GPT2BPETokenizer::eod() const { return impl_->eod; }

std::string GPT2BPETokenizer::describe() const {
  return concat("GPT2BPETokenizer(", impl_->vocab_file, ", ", impl_->merge_file, ", vocab ",
                vocab_size(), ", eod ", impl_->eod, ")");
}

}  // namespace megatron::data
