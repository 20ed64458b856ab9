#include "data/byte_level_bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "data/bpe_merge.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

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

// The bytes of `token`'s code points when all are in the byte alphabet (false otherwise).
bool to_bytes(std::string_view token, std::string& bytes) {
  const auto& alphabet = byte_alphabet();
  for (char32_t cp : uc::decode_utf8_lossy(token)) {
    if (cp >= alphabet.to_byte.size() || alphabet.to_byte[cp] < 0) return false;
    bytes.push_back(static_cast<char>(alphabet.to_byte[cp]));
  }
  return true;
}

constexpr size_t kCacheShards = 64;
constexpr size_t kCacheShardCapacity = 1 << 13;  // entries per shard before it is cleared
constexpr size_t kMaxCachedBytes = 96;           // longer pre-tokens are not cached
constexpr size_t kHeapBpeMinSymbols = 48;        // the heap BPE for pre-tokens this long

}  // namespace

struct ByteLevelBpe::Impl {
  std::string source;
  std::array<int32_t, 256> byte_id{};
  MergeMap merges;
  int32_t rank = 0;
  bool heap_ok = true;  // merges ranked consistently: the heap BPE equals the reference
  TokenIds token_ids;   // loading
  // ignore_merges: byte string of a byte-level token -> its id.
  TokenIds whole_words;

  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kCacheShards> cache;

  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_heap(std::vector<int32_t>& word) const;
};

ByteLevelBpe::ByteLevelBpe(const nlohmann::json& j, std::string source)
    : impl_(std::make_unique<Impl>()) {
  static_assert(kCacheShards == 64, "the shard index takes the top 6 bits of the hash");
  impl_->source = std::move(source);
  const std::string& src = impl_->source;
  MT_INPUT_CHECK(j.is_object(), src, " must be a JSON object mapping tokens to ids, got ",
                 j.type_name());
  MT_INPUT_CHECK(!j.empty(), src, " is empty");
  const auto& alphabet = byte_alphabet();
  const size_t n = j.size();
  id_bytes_.assign(n, {});
  std::vector<bool> seen(n, false);
  for (const auto& [key, value] : j.items()) {
    MT_INPUT_CHECK(value.is_number_integer(), src, ": token '", key, "' has a non-integer id (",
                   value.dump(), ")");
    const int64_t id = value.get<int64_t>();
    MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < n, src, ": token '", key, "' has id ", id,
                   ", outside 0..", n - 1, " (ids must number the ", n, " tokens from 0)");
    MT_INPUT_CHECK(!seen[id], src, ": id ", id, " is used by more than one token (one is '", key,
                   "')");
    seen[id] = true;
    MT_INPUT_CHECK(uc::find_invalid_utf8(key) == std::string_view::npos, src, ": token with id ",
                   id, " is not valid UTF-8");
    // Byte-level tokens decode to their bytes; any other (an added special token) to its text.
    std::string bytes;
    const bool byte_level = to_bytes(key, bytes);
    id_bytes_[id] = byte_level ? bytes : key;
    if (byte_level) impl_->whole_words.emplace(bytes, static_cast<int32_t>(id));
    impl_->token_ids.emplace(key, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    uc::append_utf8(alphabet.to_char[b], key);
    const auto it = impl_->token_ids.find(key);
    MT_INPUT_CHECK(it != impl_->token_ids.end(), src, " lacks the single-byte token '", key,
                   "' (byte ", b, "): a byte-level vocabulary has all 256");
    impl_->byte_id[b] = it->second;
  }
}

ByteLevelBpe::~ByteLevelBpe() = default;

std::optional<int32_t> ByteLevelBpe::id_of(std::string_view token) const {
  const auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

void ByteLevelBpe::add_merge(std::string_view a, std::string_view b, const std::string& where,
                             const std::string& vocab_name) {
  add_merge_to(
      impl_->merges, impl_->rank, [&](std::string_view t) { return id_of(t); }, a, b, where,
      vocab_name);
}

int64_t ByteLevelBpe::finish_loading() {
  // The heap BPE processes merges in rank order pair by pair; it equals the reference's
  // "merge every occurrence of the best pair" when a merge's parts are only ever produced by
  // lower-ranked merges (true for GPT-2's files). Otherwise use the reference algorithm only.
  std::unordered_map<int32_t, int32_t> last_made;
  for (const auto& [key, m] : impl_->merges) {
    auto [it, inserted] = last_made.emplace(m.result, m.rank);
    if (!inserted) it->second = std::max(it->second, m.rank);
  }
  for (const auto& [key, m] : impl_->merges)
    for (int32_t part :
         {static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu)}) {
      const auto it = last_made.find(part);
      if (it != last_made.end() && it->second >= m.rank) impl_->heap_ok = false;
    }
  impl_->token_ids.clear();
  impl_->token_ids.rehash(0);
  if (!ignore_merges_) {
    impl_->whole_words.clear();
    impl_->whole_words.rehash(0);
  }
  return impl_->rank;
}

// The reference algorithm: repeatedly take the adjacent pair of lowest rank and merge all of its
// occurrences left to right; the heap variant for long pre-tokens.
void ByteLevelBpe::Impl::bpe(std::string_view word_bytes, std::vector<int32_t>& out) const {
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

void ByteLevelBpe::Impl::bpe_heap(std::vector<int32_t>& word) const {
  merge_by_rank(
      word,
      [&](int32_t a, int32_t b) -> const BpeMerge* {
        const auto it = merges.find(pair_key(a, b));
        return it == merges.end() ? nullptr : &it->second;
      },
      StaleCheck::Parts);
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(impl_->byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto it = impl_->whole_words.find(word);
    if (it != impl_->whole_words.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedBytes) {
    impl_->bpe(word, out);
    return;
  }
  const size_t h = StringHash{}(word);
  Impl::Shard& shard = impl_->cache[(h * 0x9E3779B97F4A7C15ull) >> 58];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  impl_->bpe(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

std::string ByteLevelBpe::token_bytes(std::string_view token) {
  std::string bytes;
  return to_bytes(token, bytes) ? bytes : std::string(token);
}

const std::string& ByteLevelBpe::bytes_of(int32_t id, const std::string& what) const {
  MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < id_bytes_.size(), what, ": token id ", id,
                 " is out of range (vocab ", id_bytes_.size(), ")");
  return id_bytes_[id];
}

}  // namespace megatron::data
