#pragma once
// Supervised fine-tuning (SFT) data: conversations from a JSONL file, tokenized with a chat
// template, served as fixed-length samples of seq_length + 1 tokens with a loss mask that is on
// only for the assistant's (response's) tokens. data/README.md ("SFT datasets") documents it.
//
// Input: one JSON object per non-blank line, either
//   {"prompt": "...", "response": "..."}                  (optional "system": "...")
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
// Other keys are ignored. A line that is not valid JSON, is not an object, has both or neither
// form, a non-string value, an unknown role, no assistant message, ... is an InputError
// "FILE:LINE: ...". (Prompt/response = messages [system,] user, assistant.)
//
// Chat template (data/chat_template.h; `simple` by default): each conversation becomes token ids
// and per-token loss flags, on only for the assistant's answers and the token ending each of
// them.
//
// Samples (S = seq_length, each S + 1 tokens; labels = tokens[1:], loss_mask[t] weighs the
// prediction of tokens[t + 1]):
//   Packed  conversations, in the epoch's order, are appended to the current sample while they
//           fit in S + 1 tokens; one that does not fit starts the next sample (the rest of the
//           current one is padding). A conversation never spans two samples; one longer than
//           S + 1 tokens gets a sample of its own, truncated on the right.
//   Padded  one conversation per sample, truncated on the right to S + 1 tokens.
//   Padding uses the tokenizer's pad() (eod() when it has none) with loss mask 0. The prediction
//   of a conversation's first token from the previous conversation's last is never trained.
//   Packed samples carry per-token positions restarting at 0 in each conversation and segment ids
//   (the conversation's index in the sample; padding is one more segment) so that attention and
//   positions see each conversation as if it were alone in its row.
// Order: the split's conversations (split_document_ranges over the file's conversations, in file
// order) are shuffled per epoch by one NumpyRandomState(seed) (epoch 0's shuffle first, then
// epoch 1's, ...); epochs are added until num_samples samples exist (unset: one epoch).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"
#include "data/gpt_dataset.h"
#include "data/gpt_sampler.h"
#include "data/tokenizer.h"

namespace megatron::data {

// Parses one JSONL line into messages; InputError "WHERE: ..." (where = "FILE:LINE").
std::vector<SFTMessage> parse_sft_line(std::string_view line, const std::string& where);

// All conversations of a JSONL file, tokenized.
class SFTConversations {
 public:
  static std::shared_ptr<const SFTConversations> load(
      const std::string& path, const Tokenizer& tokenizer,
      ChatTemplate chat_template = ChatTemplate::Simple);

  int64_t size() const { return static_cast<int64_t>(lines_.size()); }
  std::span<const int32_t> tokens(int64_t i) const;
  std::span<const uint8_t> loss(int64_t i) const;  // per token: 1 = in the loss
  int64_t line(int64_t i) const { return lines_.at(static_cast<size_t>(i)); }  // 1-based
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_loss_tokens() const { return loss_tokens_; }
  const std::string& path() const { return path_; }
  int32_t pad_id() const { return pad_; }  // tokenizer pad(), else eod()
  int32_t eod() const { return eod_; }

 private:
  std::string path_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> loss_;
  std::vector<int64_t> offsets_{0};
  std::vector<int64_t> lines_;
  int64_t loss_tokens_ = 0;
  int32_t pad_ = 0, eod_ = 0;
};

enum class SFTPacking { Packed, Padded };
// "packed" / "padded"; InputError otherwise.
SFTPacking sft_packing_from_name(std::string_view name);

// A conversation longer than S + 1 tokens: Right keeps its first S + 1 tokens, Left its last
// (the start of the prompt goes, the answer stays), Drop leaves it out. In every mode a
// conversation with no trained token in what is kept is left out of the dataset and counted
// (it would only add batches with nothing to learn, or none at all).
enum class SFTTruncation { Right, Left, Drop };
// "right" / "left" / "drop"; InputError otherwise.
SFTTruncation sft_truncation_from_name(std::string_view name);

struct SFTDatasetConfig {
  int64_t seq_length = 0;              // S >= 1
  uint64_t seed = 1234;                // numpy RandomState seed: < 2^32
  std::optional<int64_t> num_samples;  // unset: one epoch
  SFTPacking packing = SFTPacking::Packed;
  SFTTruncation truncation = SFTTruncation::Right;
  // Progress and warnings (one line each, no newline). Unset: "[data] ..." lines on stderr.
  std::function<void(const std::string&)> log;
};

struct SFTSample {
  std::vector<int32_t> tokens;           // [S + 1]
  std::vector<uint8_t> loss_mask;        // [S]: 1 when labels[t] = tokens[t + 1] is trained on
  std::vector<int32_t> document_starts;  // offset in tokens of each conversation it holds
  std::vector<int32_t> position_ids;     // [S]: position of token t within its conversation
  std::vector<int32_t> segment_ids;      // [S]: conversation index of token t (padding: one more)
  std::vector<int64_t> conversations;    // their conversation ids (SFTConversations index)
  int32_t num_tokens = 0;                // real tokens; [num_tokens, S + 1) is padding
  int32_t truncated = 0;                 // 1 when its conversation was cut to S + 1 tokens
};

class SFTDataset final : public SampleDataset {
 public:
  // split_id 0/1/2 = train/valid/test of `split` (Megatron's split string) over the
  // conversations. InputError (naming the file and split) for an empty split, one whose every
  // conversation is left out (no trained token within S + 1, or dropped) or bad settings.
  static std::shared_ptr<SFTDataset> build(std::shared_ptr<const SFTConversations> data,
                                           int split_id, const std::string& split,
                                           const SFTDatasetConfig& config);

  int64_t num_samples() const override { return static_cast<int64_t>(sample_begin_.size()) - 1; }
  int64_t seq_length() const override { return config_.seq_length; }
  void get(int64_t index, int32_t* out) const override;  // the S + 1 tokens
  std::string describe() const override;
  SFTSample get_sample(int64_t index) const;  // const, thread-safe

  int64_t num_epochs() const { return num_epochs_; }
  SFTPacking packing() const { return config_.packing; }
  SFTTruncation truncation() const { return config_.truncation; }
  DocumentRange conversation_range() const { return range_; }
  // Conversations of the split longer than S + 1 tokens (truncated whenever they are used).
  int64_t num_truncated_conversations() const { return truncated_conversations_; }
  // Conversations of the split left out: longer than S + 1 (truncation drop), or with no trained
  // token in what truncation keeps.
  int64_t num_dropped_conversations() const {
    return untrained_conversations_ +
           (config_.truncation == SFTTruncation::Drop ? truncated_conversations_ : 0);
  }
  int64_t num_padding_tokens() const { return padding_tokens_; }  // over all samples
  const SFTConversations& conversations() const { return *data_; }

 private:
  SFTDataset() = default;
  std::shared_ptr<const SFTConversations> data_;
  int split_id_ = 0;
  std::string split_;
  DocumentRange range_;
  SFTDatasetConfig config_;
  std::vector<int64_t> sample_begin_;  // sample k holds entries_[sample_begin_[k], [k + 1])
  std::vector<int64_t> entries_;       // conversation ids
  int64_t num_epochs_ = 0;
  int64_t truncated_conversations_ = 0;
  int64_t untrained_conversations_ = 0;  // no trained token in what truncation keeps
  int64_t padding_tokens_ = 0;
  // The conversations of the split that samples use, in file order.
  std::vector<int64_t> kept_conversations(const std::string& what);
  // Where the kept S + 1 tokens of a conversation of `size` tokens start.
  size_t kept_begin(size_t size) const;
};

}  // namespace megatron::data
