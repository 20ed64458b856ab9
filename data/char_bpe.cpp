#include "data/char_bpe.h"

#include <array>
#include <unordered_map>

#include "data/bpe_merge.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

namespace uc = unicode;

// "<0xE2>" -> 0xE2 (the byte_fallback tokens); -1 for any other token.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

struct CharBpe::Impl {
  std::string source;
  Options options;
  TokenIds token_ids;  // looked up per character while encoding
  MergeMap merges;
  std::array<int32_t, 256> byte_ids{};  // -1: the vocabulary lacks "<0xXX>"
  int32_t unk = -1;
  int32_t rank = 0;

  void merge_all(std::vector<int32_t>& word) const;
};

CharBpe::CharBpe(const nlohmann::json& j, std::string source, Options options)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->options = std::move(options);
  const std::string& src = impl_->source;
  MT_INPUT_CHECK(j.is_object() && !j.empty(), src,
                 " must be a non-empty JSON object mapping "
                 "tokens to ids");
  const size_t n = j.size();
  pieces_.assign(n, {});
  std::vector<bool> seen(n, false);
  impl_->byte_ids.fill(-1);
  for (const auto& [key, value] : j.items()) {
    MT_INPUT_CHECK(value.is_number_integer(), src, ": token '", key, "' has a non-integer id (",
                   value.dump(), ")");
    const int64_t id = value.get<int64_t>();
    MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < n && !seen[id], src, ": token '", key,
                   "' has id ", id, " (ids must number the ", n, " tokens from 0, each once)");
    MT_INPUT_CHECK(uc::find_invalid_utf8(key) == std::string_view::npos, src, ": token with id ",
                   id, " is not valid UTF-8");
    seen[id] = true;
    const int b = byte_token_value(key);
    pieces_[id] = b >= 0 ? std::string(1, static_cast<char>(b)) : key;
    if (b >= 0) impl_->byte_ids[b] = static_cast<int32_t>(id);
    impl_->token_ids.emplace(key, static_cast<int32_t>(id));
  }
  if (impl_->options.unk_token) {
    const auto unk = id_of(*impl_->options.unk_token);
    MT_INPUT_CHECK(unk.has_value(), src, ": the unk_token '", *impl_->options.unk_token,
                   "' is not in the vocabulary");
    impl_->unk = *unk;
  }
}

CharBpe::~CharBpe() = default;

std::optional<int32_t> CharBpe::id_of(std::string_view token) const {
  const auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

void CharBpe::add_merge(std::string_view a, std::string_view b, const std::string& where,
                        const std::string& vocab_name) {
  add_merge_to(
      impl_->merges, impl_->rank, [&](std::string_view t) { return id_of(t); }, a, b, where,
      vocab_name);
}

// (The token table stays: encoding looks every character up in it.)
int64_t CharBpe::finish_loading() { return impl_->rank; }

// `tokenizers`' Word::merge_all.
void CharBpe::Impl::merge_all(std::vector<int32_t>& word) const {
  merge_by_rank(
      word,
      [&](int32_t a, int32_t b) -> const BpeMerge* {
        const auto it = merges.find(pair_key(a, b));
        return it == merges.end() ? nullptr : &it->second;
      },
      StaleCheck::Result);
}

void CharBpe::encode_word(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (impl_->options.ignore_merges)
    if (const auto whole = id_of(text)) {
      out.push_back(*whole);
      return;
    }
  std::vector<int32_t> word;
  bool last_unk = false;
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0xF0)
      len = 4;
    else if (c >= 0xE0)
      len = 3;
    else if (c >= 0xC0)
      len = 2;
    const std::string_view ch = text.substr(i, len);
    i += len;
    if (const auto id = id_of(ch)) {
      word.push_back(*id);
      last_unk = false;
      continue;
    }
    if (impl_->options.byte_fallback) {
      bool all = true;
      for (char b : ch) all &= impl_->byte_ids[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        for (char b : ch) word.push_back(impl_->byte_ids[static_cast<unsigned char>(b)]);
        last_unk = false;
        continue;
      }
    }
    MT_INPUT_CHECK(impl_->unk >= 0, impl_->source, ": the character '", ch,
                   "' is in no token and there is no unk_token");
    if (!(impl_->options.fuse_unk && last_unk)) word.push_back(impl_->unk);
    last_unk = true;
  }
  impl_->merge_all(word);
  out.insert(out.end(), word.begin(), word.end());
}

const std::string& CharBpe::piece_of(int32_t id, const std::string& what) const {
  MT_INPUT_CHECK(id >= 0 && static_cast<size_t>(id) < pieces_.size(), what, ": token id ", id,
                 " is out of range (vocab ", pieces_.size(), ")");
  return pieces_[id];
}

}  // namespace megatron::data
