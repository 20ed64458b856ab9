#pragma once
// The heap form of BPE both the byte-level and the character BPE run: every adjacent pair with a
// merge is a candidate ordered by (rank, position); the best is merged, its new neighbours become
// candidates, and a candidate whose pair changed since it was pushed is skipped. What "changed"
// means is the caller's: the parts themselves (byte-level BPE), or, as `tokenizers`'
// Word::merge_all checks, whether the pair now there still merges into the same token.
#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "megatron/core/error.h"

namespace megatron::data {

struct BpeMerge {
  int32_t rank;
  int32_t result;
};

enum class StaleCheck : uint8_t { Parts, Result };

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

using MergeMap = std::unordered_map<uint64_t, BpeMerge>;

// A hash that looks string_views up in a std::string-keyed map without building a string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// token -> id, looked up by string_view.
using TokenIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The next merge (a, b) of a merges list, ranked `rank` (then incremented), resolved through
// id_of(token) -> std::optional<int32_t>; a repeated pair keeps its last rank, as `tokenizers`'
// merge map does. InputError naming `where` and `vocab_name` for a token the vocabulary lacks.
template <typename IdOf>
void add_merge_to(MergeMap& merges, int32_t& rank, const IdOf& id_of, std::string_view a,
                  std::string_view b, const std::string& where, const std::string& vocab_name) {
  auto id = [&](const std::string& tok, const char* what) {
    const std::optional<int32_t> found = id_of(tok);
    MT_INPUT_CHECK(found.has_value(), where, ": ", what, " '", tok, "' is not in ", vocab_name);
    return *found;
  };
  const int32_t x = id(std::string(a), "token"), y = id(std::string(b), "token");
  const int32_t z = id(std::string(a) + std::string(b), "merged token");
  merges[pair_key(x, y)] = BpeMerge{rank, z};
  MT_INPUT_CHECK(rank < INT32_MAX, where, ": too many merges");
  ++rank;
}

// find(a, b): the merge of the pair (a, b), or null.
template <typename Find>
void merge_by_rank(std::vector<int32_t>& word, const Find& find, StaleCheck stale) {
  const int32_t n = static_cast<int32_t>(word.size());
  if (n < 2) return;
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
    if (const BpeMerge* m = find(word[pos], word[next[pos]]))
      heap.push({m->rank, pos, word[pos], word[next[pos]], m->result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t q = alive[c.pos] ? next[c.pos] : -1;
    if (q < 0) continue;
    if (stale == StaleCheck::Parts) {
      if (word[c.pos] != c.left || word[q] != c.right) continue;
    } else {
      const BpeMerge* now = find(word[c.pos], word[q]);
      if (now == nullptr || now->result != c.result) continue;
    }
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

}  // namespace megatron::data
