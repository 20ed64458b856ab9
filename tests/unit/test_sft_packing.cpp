// Packed SFT sequences train exactly like the same conversations padded one per row: the summed
// loss, the number of trained tokens and every parameter gradient agree, for learned positions
// and rope, unfused and flash attention. Also: SFTBatchSource's labels follow the loss mask.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "data/sft_dataset.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/sft_source.h"
#include "models/gpt/gpt_model.h"
#include "tests/data/data_test_util.h"

namespace megatron::training {
namespace {

using data::testing::ScratchDir;
using data::testing::write_text;

constexpr int64_t kSeq = 96;

std::shared_ptr<const data::SFTConversations> conversations(const ScratchDir& dir) {
  std::string text;
  const char* prompts[] = {"Who?", "Where does Emma live?", "Count.", "Name a book of Moses.",
                           "And?"};
  const char* answers[] = {"Emma.", "At Hartfield.", "1 2 3 4 5 6", "Exodus", "Amen"};
  for (int k = 0; k < 5; ++k)
    text += nlohmann::json({{"prompt", prompts[k]}, {"response", answers[k]}}).dump() + "\n";
  text += nlohmann::json({{"messages",
                           {{{"role", "user"}, {"content", "A?"}},
                            {{"role", "assistant"}, {"content", "B."}},
                            {{"role", "user"}, {"content", "C?"}},
                            {{"role", "assistant"}, {"content", "D!"}}}}})
              .dump() +
          "\n";
  write_text(dir.file("conv.jsonl"), text);
  static data::ByteTokenizer tok;
  return data::SFTConversations::load(dir.file("conv.jsonl"), tok);
}

std::shared_ptr<const data::SFTDataset> dataset(std::shared_ptr<const data::SFTConversations> c,
                                                data::SFTPacking packing) {
  data::SFTDatasetConfig cfg;
  cfg.seq_length = kSeq;
  cfg.packing = packing;
  cfg.log = [](const std::string&) {};
  return data::SFTDataset::build(std::move(c), 0, "1", cfg);
}

models::GPTSpec spec(bool rope, bool flash) {
  models::GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 2;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 2;
  t.ffn = 32;
  t.seq_length = kSeq;
  t.rope = rope;
  t.swiglu = rope;
  t.flash_attention = flash;
  t.init_std = 0.2f;
  s.vocab_size = 257;
  s.padded_vocab_size = models::padded_vocab(257, 8, 1);
  s.max_positions = rope ? 0 : kSeq;
  return s;
}

struct Result {
  double loss = 0, targets = 0;
  std::vector<float> grads;
};

// One forward/backward over every sample of `source` as one micro-batch.
Result run(const models::GPTSpec& s, const SFTBatchSource& source) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  models::GPTModel model(s, store, *tp);
  store.finalize();
  store.initialize(42);
  store.zero_grads();
  models::MicroBatch mb;
  source.fill(0, source.samples_per_epoch(), mb);
  mb.info = MicroBatchInfo{0, 0, true};
  models::GPTModel::Activations act;
  Result r;
  r.loss = model.forward(act, mb).lm;
  r.targets = static_cast<double>(models::count_lm_targets(mb));
  model.backward(act, mb, models::LossWeights{static_cast<float>(1.0 / r.targets), 0.0f});
  for (Parameter* p : store.params())
    r.grads.insert(r.grads.end(), p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  return r;
}

TEST(SFTPacking, PackedEqualsPaddedLossAndGradients) {
  ScratchDir dir;
  const auto convs = conversations(dir);
  const auto packed = dataset(convs, data::SFTPacking::Packed);
  const auto padded = dataset(convs, data::SFTPacking::Padded);
  ASSERT_EQ(padded->num_samples(), convs->size());
  ASSERT_LT(packed->num_samples(), padded->num_samples());  // something is really packed
  ASSERT_EQ(packed->num_truncated_conversations(), 0);
  const SFTBatchSource packed_source({packed}, {1.0}, 0), padded_source({padded}, {1.0}, 0);
  for (bool rope : {false, true}) {
    for (bool flash : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "rope=" << rope << " flash=" << flash);
      const Result a = run(spec(rope, flash), packed_source);
      const Result b = run(spec(rope, flash), padded_source);
      EXPECT_EQ(a.targets, b.targets);
      EXPECT_GT(a.targets, 0);
      EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(b.loss));
      ASSERT_EQ(a.grads.size(), b.grads.size());
      double max_diff = 0, max_abs = 0;
      for (size_t k = 0; k < a.grads.size(); ++k) {
        max_diff = std::max(max_diff, double(std::abs(a.grads[k] - b.grads[k])));
        max_abs = std::max(max_abs, double(std::abs(b.grads[k])));
      }
      EXPECT_LT(max_diff, 1e-5 * max_abs) << "max |grad| " << max_abs;
    }
  }
}

// Without segment ids and restarting positions, packing would change the loss: the test above
// is sensitive to them.
TEST(SFTPacking, DocumentMasksMatter) {
  ScratchDir dir;
  const auto convs = conversations(dir);
  const SFTBatchSource packed_source({dataset(convs, data::SFTPacking::Packed)}, {1.0}, 0);
  const SFTBatchSource padded_source({dataset(convs, data::SFTPacking::Padded)}, {1.0}, 0);
  const Result b = run(spec(true, false), padded_source);
  // The packed batch with its document tensors dropped.
  class Unmasked final : public BatchSource {
   public:
    explicit Unmasked(const SFTBatchSource& s) : s_(s) {}
    int64_t seq_length() const override { return s_.seq_length(); }
    int64_t samples_per_epoch() const override { return s_.samples_per_epoch(); }
    void fill(int64_t first, int64_t B, models::MicroBatch& mb) const override {
      s_.fill(first, B, mb);
      mb.position_ids = Tensor();
      mb.segment_ids = Tensor();
    }

   private:
    const SFTBatchSource& s_;
  };
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  models::GPTModel model(spec(true, false), store, *tp);
  store.finalize();
  store.initialize(42);
  models::MicroBatch mb;
  Unmasked(packed_source).fill(0, packed_source.samples_per_epoch(), mb);
  models::GPTModel::Activations act;
  const double leaky = model.forward(act, mb).lm;
  EXPECT_GT(std::abs(leaky - b.loss), 1e-3 * std::abs(b.loss));
}

// Labels: the next token where the loss mask is on, kIgnoreIndex elsewhere; segment ids and
// positions as the sample says.
TEST(SFTPacking, BatchFollowsTheSample) {
  ScratchDir dir;
  const auto packed = dataset(conversations(dir), data::SFTPacking::Packed);
  const SFTBatchSource source({packed}, {1.0}, 0);
  models::MicroBatch mb;
  const int64_t B = 2;
  source.fill(1, B, mb);
  ASSERT_TRUE(models::present(mb.position_ids) && models::present(mb.segment_ids));
  for (int64_t b = 0; b < B; ++b) {
    const data::SFTSample s = packed->get_sample(1 + b);
    for (int64_t t = 0; t < kSeq; ++t) {
      const auto k = static_cast<size_t>(t);
      EXPECT_EQ(mb.tokens.data<int32_t>()[t * B + b], s.tokens[k]);
      EXPECT_EQ(mb.labels.data<int32_t>()[t * B + b],
                s.loss_mask[k] ? s.tokens[k + 1] : models::kIgnoreIndex);
      EXPECT_EQ(mb.position_ids.data<int32_t>()[t * B + b], s.position_ids[k]);
      EXPECT_EQ(mb.segment_ids.data<int32_t>()[b * kSeq + t], s.segment_ids[k]);
    }
    // Positions restart at every conversation start.
    for (int32_t start : s.document_starts) {
      if (start < kSeq) {
        EXPECT_EQ(s.position_ids[static_cast<size_t>(start)], 0);
      }
    }
  }
}

}  // namespace
}  // namespace megatron::training
