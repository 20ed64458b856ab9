#pragma once
// The added tokens of a Hugging Face tokenizer.json found in text as `tokenizers` finds them
// (data/tokenizer_hf.h): leftmost-longest matches; lstrip / rstrip take the whitespace before /
// after a match (not past the previous one); single_word tokens match only with no word
// character (Rust regex's \w) right before or after them.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace megatron::data {

// The added tokens matched in one pass: content -> id.
struct AddedSet {
  struct Token {
    int32_t id;
    bool lstrip = false, rstrip = false;  // the match takes the whitespace before / after it
    bool single_word = false;  // matches only with no word character right before or after it
  };
  std::map<std::string, Token> tokens;
  std::array<bool, 256> first_bytes{};  // which bytes start a token
  void add(const std::string& content, Token token) {
    tokens[content] = token;
    first_bytes[static_cast<unsigned char>(content[0])] = true;
  }
};

// White_Space runs (Rust's char::is_whitespace): the length of the one ending at `end` of text,
// not reaching before `floor`, and of the one starting at `begin`.
size_t whitespace_before(std::string_view text, size_t floor, size_t end);
size_t whitespace_after(std::string_view text, size_t begin);
// Whether the code point ending at byte `end` of text (none at 0) / starting at `begin` (none at
// the end) is a word character (Rust regex's \w).
bool word_char_before(std::string_view text, size_t end);
bool word_char_after(std::string_view text, size_t begin);

// Calls on_text(piece) for each non-empty stretch of `text` between the added tokens of `set`
// and on_token(id) for each token, in order; a token is the longest one starting at the
// earliest position (`tokenizers`' leftmost-longest match).
template <typename OnText, typename OnToken>
void split_added(std::string_view text, const AddedSet& set, OnText&& on_text, OnToken&& on_token) {
  size_t i = 0, start = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::pair<const std::string, AddedSet::Token>* hit = nullptr;
    if (set.first_bytes[c]) {
      // The map is sorted: the tokens starting with byte c are one range.
      for (auto it = set.tokens.lower_bound(std::string(1, static_cast<char>(c)));
           it != set.tokens.end() && static_cast<unsigned char>(it->first[0]) == c; ++it)
        if (text.compare(i, it->first.size(), it->first) == 0 &&
            (hit == nullptr || it->first.size() > hit->first.size()))
          hit = &*it;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    // A single_word token inside a word is no match; the search goes on after it, as
    // `tokenizers`' leftmost-longest iterator does.
    if (hit->second.single_word &&
        (word_char_before(text, i) || word_char_after(text, i + hit->first.size()))) {
      i += hit->first.size();
      continue;
    }
    // lstrip / rstrip: the whitespace next to the token is part of the match (dropped), as
    // `tokenizers`' AddedVocabulary extends it (not past the previous match).
    const size_t before = hit->second.lstrip ? whitespace_before(text, start, i) : 0;
    if (i - before > start) on_text(text.substr(start, i - before - start));
    on_token(hit->second.id);
    i += hit->first.size();
    if (hit->second.rstrip) i += whitespace_after(text, i);
    start = i;
  }
  if (start < text.size()) on_text(text.substr(start));
}

}  // namespace megatron::data
