#include "data/sft_dataset.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "data/numpy_random.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

void default_log(const std::string& line) { std::cerr << "[data] " << line << "\n"; }

const std::string& string_field(const nlohmann::json& j, const char* key, const std::string& where,
                                const std::string& what) {
  const auto it = j.find(key);
  MT_INPUT_CHECK(it != j.end(), where, ": ", what, " has no \"", key, "\"");
  MT_INPUT_CHECK(it->is_string(), where, ": ", what, "'s \"", key, "\" is not a string (got ",
                 it->type_name(), ")");
  return it->get_ref<const std::string&>();
}

}  // namespace

std::vector<SFTMessage> parse_sft_line(std::string_view line, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
    throw InputError(concat(where, ": invalid JSON: ", e.what()));
  }
  MT_INPUT_CHECK(j.is_object(), where, ": expected a JSON object, got ", j.type_name());
  const bool has_messages = j.contains("messages");
  const bool has_prompt = j.contains("prompt") || j.contains("response");
  MT_INPUT_CHECK(!(has_messages && has_prompt), where,
                 ": has both \"messages\" and \"prompt\"/\"response\"; use one form");
  MT_INPUT_CHECK(has_messages || has_prompt, where,
                 ": expected \"messages\" (a chat) or \"prompt\" and \"response\"");
  std::vector<SFTMessage> out;
  if (has_prompt) {
    if (j.contains("system"))
      out.push_back({"system", string_field(j, "system", where, "the line")});
    out.push_back({"user", string_field(j, "prompt", where, "the line")});
    out.push_back({"assistant", string_field(j, "response", where, "the line")});
    return out;
  }
  const nlohmann::json& msgs = j["messages"];
  MT_INPUT_CHECK(msgs.is_array(), where, ": \"messages\" is not an array (got ", msgs.type_name(),
                 ")");
  MT_INPUT_CHECK(!msgs.empty(), where, ": \"messages\" is empty");
  bool has_assistant = false;
  for (size_t k = 0; k < msgs.size(); ++k) {
    const std::string what = concat("message ", k + 1);
    MT_INPUT_CHECK(msgs[k].is_object(), where, ": ", what, " is not an object (got ",
                   msgs[k].type_name(), ")");
    SFTMessage m{string_field(msgs[k], "role", where, what),
                 string_field(msgs[k], "content", where, what)};
    MT_INPUT_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", where, ": ",
                   what, " has the unknown role '", m.role,
                   "' (expected system, user or assistant)");
    has_assistant |= m.role == "assistant";
    out.push_back(std::move(m));
  }
  MT_INPUT_CHECK(has_assistant, where,
                 ": the conversation has no assistant message (nothing to train on)");
  return out;
}

std::shared_ptr<const SFTConversations> SFTConversations::load(const std::string& path,
                                                               const Tokenizer& tok,
                                                               ChatTemplate chat_template) {
  std::ifstream in(path, std::ios::binary);
  MT_INPUT_CHECK(in.is_open(), "cannot open SFT data file '", path, "'");
  auto c = std::make_shared<SFTConversations>();
  c->path_ = path;
  c->eod_ = tok.eod();
  c->pad_ = tok.pad() >= 0 ? tok.pad() : tok.eod();
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string where = concat(path, ":", line_no);
    const std::vector<SFTMessage> messages = parse_sft_line(line, where);
    const size_t before = c->tokens_.size();
    try {
      tokenize_conversation(chat_template, messages, tok, c->tokens_, c->loss_);
    } catch (const InputError& e) {
      throw InputError(concat(where, ": ", e.what()));
    }
    for (size_t k = before; k < c->loss_.size(); ++k) c->loss_tokens_ += c->loss_[k];
    c->offsets_.push_back(static_cast<int64_t>(c->tokens_.size()));
    c->lines_.push_back(line_no);
  }
  MT_INPUT_CHECK(!in.bad(), "read error on SFT data file '", path, "'");
  MT_INPUT_CHECK(!c->lines_.empty(), "SFT data file '", path, "' holds no conversation");
  return c;
}

std::span<const int32_t> SFTConversations::tokens(int64_t i) const {
  MT_CHECK(i >= 0 && i < size(), "conversation ", i, " out of range");
  const auto b = static_cast<size_t>(offsets_[static_cast<size_t>(i)]);
  const auto e = static_cast<size_t>(offsets_[static_cast<size_t>(i) + 1]);
  return std::span<const int32_t>(tokens_).subspan(b, e - b);
}

std::span<const uint8_t> SFTConversations::loss(int64_t i) const {
  MT_CHECK(i >= 0 && i < size(), "conversation ", i, " out of range");
  const auto b = static_cast<size_t>(offsets_[static_cast<size_t>(i)]);
  const auto e = static_cast<size_t>(offsets_[static_cast<size_t>(i) + 1]);
  return std::span<const uint8_t>(loss_).subspan(b, e - b);
}

SFTPacking sft_packing_from_name(std::string_view name) {
  if (name == "packed") return SFTPacking::Packed;
  if (name == "padded") return SFTPacking::Padded;
  throw InputError(concat("unknown SFT packing '", name, "' (expected packed or padded)"));
}

SFTTruncation sft_truncation_from_name(std::string_view name) {
  if (name == "right") return SFTTruncation::Right;
  if (name == "left") return SFTTruncation::Left;
  if (name == "drop") return SFTTruncation::Drop;
  throw InputError(concat("unknown SFT truncation '", name, "' (expected right, left or drop)"));
}

namespace {
const char* truncation_name(SFTTruncation t) {
  return t == SFTTruncation::Right ? "right" : t == SFTTruncation::Left ? "left" : "drop";
}
}  // namespace

size_t SFTDataset::kept_begin(size_t size) const {
  const auto window = static_cast<size_t>(config_.seq_length + 1);
  return config_.truncation == SFTTruncation::Left && size > window ? size - window : 0;
}

std::vector<int64_t> SFTDataset::kept_conversations(const std::string& what) {
  const SFTConversations& conv = *data_;
  const auto window = static_cast<size_t>(config_.seq_length + 1);
  std::vector<int64_t> kept;
  for (int64_t c = range_.begin; c < range_.end; ++c) {
    const auto loss = conv.loss(c);
    const bool long_one = loss.size() > window;
    truncated_conversations_ += long_one ? 1 : 0;
    if (long_one && config_.truncation == SFTTruncation::Drop) continue;
    // Trained tokens in the kept part; its first token is never predicted (get_sample).
    const size_t b = kept_begin(loss.size());
    const size_t e = std::min(loss.size(), b + window);
    const bool trains = std::any_of(loss.begin() + static_cast<std::ptrdiff_t>(b) + 1,
                                    loss.begin() + static_cast<std::ptrdiff_t>(e),
                                    [](uint8_t f) { return f != 0; });
    if (trains)
      kept.push_back(c);
    else
      ++untrained_conversations_;
  }
  MT_INPUT_CHECK(!kept.empty(), what, ": none of its ", range_.size(),
                 " conversations has a trained (assistant) token within seq_length + 1 = ", window,
                 " tokens with data.sft.truncation: ", truncation_name(config_.truncation),
                 config_.truncation == SFTTruncation::Left
                     ? ""
                     : " (data.sft.truncation: left keeps the end of a long conversation)",
                 "; nothing to train on");
  return kept;
}

std::shared_ptr<SFTDataset> SFTDataset::build(std::shared_ptr<const SFTConversations> data,
                                              int split_id, const std::string& split,
                                              const SFTDatasetConfig& config) {
  MT_CHECK(data != nullptr, "SFTDataset needs conversations");
  const std::string what =
      concat("SFT dataset '", data->path(), "' (", split_name(split_id), " split)");
  MT_INPUT_CHECK(config.seq_length >= 1 && config.seq_length < std::numeric_limits<int32_t>::max(),
                 what, ": seq_length must be >= 1, got ", config.seq_length);
  MT_INPUT_CHECK(config.seed < (uint64_t{1} << 32), what, ": the seed must be < 2^32, got ",
                 config.seed);
  MT_INPUT_CHECK(!config.num_samples || *config.num_samples >= 0, what,
                 ": num_samples must be >= 0, got ", *config.num_samples);
  const auto ranges = split_document_ranges(split, data->size());
  const DocumentRange range = ranges.at(static_cast<size_t>(split_id));
  MT_INPUT_CHECK(range.size() > 0, what, ": data split '", split, "' leaves it empty (",
                 data->size(), " conversations: train [", ranges[0].begin, ", ", ranges[0].end,
                 "), valid [", ranges[1].begin, ", ", ranges[1].end, "), test [", ranges[2].begin,
                 ", ", ranges[2].end, "))");

  std::shared_ptr<SFTDataset> ds(new SFTDataset());
  ds->data_ = std::move(data);
  ds->split_id_ = split_id;
  ds->split_ = split;
  ds->range_ = range;
  ds->config_ = config;
  const SFTConversations& conv = *ds->data_;
  const int64_t window = config.seq_length + 1;
  const std::vector<int64_t> kept = ds->kept_conversations(what);

  NumpyRandomState rng(config.seed);
  std::vector<int64_t> order;
  ds->sample_begin_.push_back(0);
  const auto close_sample = [&](int64_t used) {
    ds->sample_begin_.push_back(static_cast<int64_t>(ds->entries_.size()));
    ds->padding_tokens_ += window - used;
  };
  const int64_t wanted = config.num_samples ? *config.num_samples : 0;
  do {
    order = kept;
    rng.shuffle(std::span<int64_t>(order));
    int64_t used = 0;  // tokens in the open sample (packed)
    for (const int64_t c : order) {
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(conv.tokens(c).size()), window);
      if (config.packing == SFTPacking::Padded) {
        ds->entries_.push_back(c);
        close_sample(len);
        continue;
      }
      if (used > 0 && used + len > window) {
        close_sample(used);
        used = 0;
      }
      ds->entries_.push_back(c);
      used += len;
    }
    if (used > 0) close_sample(used);
    ++ds->num_epochs_;
  } while (ds->num_samples() < wanted);

  const auto& log = config.log ? config.log : default_log;
  log(ds->describe());
  if (ds->truncated_conversations_ > 0)
    log(concat("warning: ", what, ": ", ds->truncated_conversations_, " of ", range.size(),
               " conversations are longer than seq_length + 1 = ", window, " tokens and are ",
               config.truncation == SFTTruncation::Drop   ? "dropped (data.sft.truncation: drop)"
               : config.truncation == SFTTruncation::Left ? "truncated on the left"
                                                          : "truncated on the right"));
  if (ds->untrained_conversations_ > 0)
    log(concat("warning: ", what, ": ", ds->untrained_conversations_, " of ", range.size(),
               " conversations have no trained (assistant) token within the ", window,
               " tokens data.sft.truncation: ", truncation_name(config.truncation),
               " keeps, and are dropped",
               config.truncation == SFTTruncation::Right
                   ? " (data.sft.truncation: left would keep them)"
                   : ""));
  return ds;
}

SFTSample SFTDataset::get_sample(int64_t index) const {
  MT_CHECK(index >= 0 && index < num_samples(), "SFT sample ", index, " out of range [0, ",
           num_samples(), ")");
  const auto window = static_cast<size_t>(config_.seq_length + 1);
  SFTSample s;
  s.tokens.reserve(window);
  std::vector<uint8_t> token_loss;
  token_loss.reserve(window);
  for (int64_t e = sample_begin_[static_cast<size_t>(index)];
       e < sample_begin_[static_cast<size_t>(index) + 1]; ++e) {
    const int64_t c = entries_[static_cast<size_t>(e)];
    const auto toks = data_->tokens(c);
    const auto loss = data_->loss(c);
    const size_t begin = kept_begin(toks.size());
    const size_t take = std::min(toks.size() - begin, window - s.tokens.size());
    s.truncated |= take < toks.size() ? 1 : 0;
    s.document_starts.push_back(static_cast<int32_t>(s.tokens.size()));
    s.conversations.push_back(c);
    const auto first = static_cast<std::ptrdiff_t>(begin);
    const auto last = static_cast<std::ptrdiff_t>(begin + take);
    s.tokens.insert(s.tokens.end(), toks.begin() + first, toks.begin() + last);
    token_loss.insert(token_loss.end(), loss.begin() + first, loss.begin() + last);
  }
  s.num_tokens = static_cast<int32_t>(s.tokens.size());
  s.tokens.resize(window, data_->pad_id());
  token_loss.resize(window, 0);
  // Never train the prediction of a conversation's first token from the previous one.
  for (int32_t start : s.document_starts) token_loss[static_cast<size_t>(start)] = 0;
  s.loss_mask.assign(token_loss.begin() + 1, token_loss.end());
  const auto S = static_cast<size_t>(config_.seq_length);
  s.position_ids.resize(S);
  s.segment_ids.resize(S);
  size_t doc = 0;
  int32_t start = 0;
  for (size_t t = 0; t < S; ++t) {
    const int32_t pos = static_cast<int32_t>(t);
    const bool next_doc = doc < s.document_starts.size() && s.document_starts[doc] == pos;
    const bool padding = pos == s.num_tokens && !next_doc;
    if (next_doc || padding) {
      start = pos;
      if (next_doc) ++doc;
      if (padding) doc = s.document_starts.size() + 1;
    }
    s.segment_ids[t] = static_cast<int32_t>(doc) - 1;
    s.position_ids[t] = pos - start;
  }
  return s;
}

void SFTDataset::get(int64_t index, int32_t* out) const {
  const SFTSample s = get_sample(index);
  std::copy(s.tokens.begin(), s.tokens.end(), out);
}

std::string SFTDataset::describe() const {
  return concat(
      "SFTDataset(", data_->path(), ", ", split_name(split_id_), " conversations [", range_.begin,
      ", ", range_.end, ") of ", data_->size(), " (split ", split_, "), ",
      config_.packing == SFTPacking::Packed ? "packed" : "padded", ", seq_length ",
      config_.seq_length, ", seed ", config_.seed, ", ", num_samples(), " samples in ", num_epochs_,
      " epoch", num_epochs_ == 1 ? "" : "s",
      config_.num_samples ? concat(" (", *config_.num_samples, " requested)") : std::string(), ")");
}

}  // namespace megatron::data
