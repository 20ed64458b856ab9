// Mixed precision on the CPU: bf16/fp16 model weights with fp32 master weights and main
// gradients, and fp16 dynamic loss scaling (skip on overflow, back off, grow).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/common/numeric.h"
#include "megatron/optimizer/loss_scaler.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

TEST(LossScaler, FollowsMegatronsDynamicRule) {
  optim::LossScalerConfig c;
  c.initial_scale = 1024;
  c.growth_interval = 3;
  c.hysteresis = 2;
  optim::LossScaler s(true, c);
  s.update(true);  // first overflow: hysteresis absorbs it
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // second: back off
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // hysteresis used up: every overflow backs off
  EXPECT_EQ(s.scale(), 256);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 256);
  s.update(false);  // third clean step in a row: grow, hysteresis restored
  EXPECT_EQ(s.scale(), 512);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 4);
  optim::LossScaler constant(false);
  constant.update(true);
  EXPECT_EQ(constant.scale(), 1.0);
  c.min_scale = 300;
  optim::LossScaler floor(true, c);
  for (int i = 0; i < 10; ++i) floor.update(true);
  EXPECT_EQ(floor.scale(), 300);
}

class PatternSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 8; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= 8; ++t) tokens[t] = static_cast<int32_t>((index * 5 + t * 3) % 13);
  }
};

training::TrainSummary train(const std::string& precision, ParamStore** store_out = nullptr,
                             std::unique_ptr<training::Trainer>* keep = nullptr,
                             const std::string& training_extra = "",
                             const std::string& optimizer_extra = "") {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 8,"
       " make_vocab_size_divisible_by: 16}\n"
       "training: {micro_batch_size: 4, global_batch_size: 8, train_iters: 40, seed: 3,"
       " peak_tflops: 1.0, precision: "
    << precision << training_extra
    << "}\n"
       "optimizer: {lr: 0.01, min_lr: 0.001, schedule: {warmup_iters: 2}"
    << optimizer_extra
    << "}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 1000}\n";
  auto src = std::make_shared<PatternSource>();
  static auto world = parallel::make_single_process_communicator();
  static std::ostringstream log;
  auto t = std::make_unique<training::Trainer>(config::parse_recipe_string(y.str(), "mp.yaml"), 13,
                                               src, nullptr, *world, log);
  auto summary = t->run();
  if (store_out) *store_out = &t->params();
  if (keep) *keep = std::move(t);
  return summary;
}

TEST(MixedPrecision, Bf16WeightsAreBf16AndTrainLikeFp32) {
  const auto fp32 = train("fp32");
  ParamStore* store = nullptr;
  std::unique_ptr<training::Trainer> keep;
  const auto bf16 = train("bf16", &store, &keep);
  ASSERT_TRUE(store->mixed_precision());
  EXPECT_EQ(store->weights().dtype(), DType::BF16);
  EXPECT_EQ(store->masters().dtype(), DType::F32);
  // The model weights the layers computed with are the masters rounded to bf16; the masters
  // carry more bits.
  int64_t differ = 0;
  const bf16_t* weight = store->weights().data<bf16_t>();
  const float* master = store->masters().data<float>();
  for (int64_t i = 0; i < store->numel(); ++i) {
    ASSERT_EQ(weight[i].bits, math::float_to_bf16_bits(master[i])) << i;
    differ += math::bf16_bits_to_float(weight[i].bits) != master[i];
  }
  EXPECT_GT(differ, store->numel() / 2);
  EXPECT_LT(bf16.steps.back().loss, 0.6 * bf16.steps.front().loss);
  EXPECT_NEAR(bf16.steps.back().loss, fp32.steps.back().loss, 0.05 * fp32.steps.back().loss);
  for (const auto& s : bf16.steps) EXPECT_EQ(s.loss_scale, 1.0);
}

TEST(MixedPrecision, Fp16SkipsOverflowingStepsAndBacksOff) {
  const auto fp16 = train("fp16");
  // 2^32 overflows fp16 gradients: the first steps are skipped while the scale backs off.
  ASSERT_TRUE(fp16.steps.front().skipped);
  EXPECT_EQ(fp16.steps.front().loss_scale, 4294967296.0);
  int skipped = 0;
  for (const auto& s : fp16.steps) skipped += s.skipped;
  EXPECT_GE(skipped, 2);
  EXPECT_FALSE(fp16.steps.back().skipped);
  EXPECT_LT(fp16.steps.back().loss_scale, fp16.steps.front().loss_scale);
  EXPECT_LT(fp16.steps.back().loss, 0.7 * fp16.steps.front().loss);
  // Skipped steps do not advance the LR schedule: the first update runs at the warmup's first
  // LR (0, as Megatron's scheduler starts) and the next at its second (0.01 / 2), whatever
  // iterations they happen at; fp32 (never skipping) at iterations 1 and 2.
  const auto updated = [](const auto& s) { return !s.skipped; };
  const auto first = std::find_if(fp16.steps.begin(), fp16.steps.end(), updated);
  ASSERT_NE(first, fp16.steps.end());
  EXPECT_GT(first->iteration, 1);
  EXPECT_DOUBLE_EQ(first->lr, 0.0);
  const auto second = std::find_if(first + 1, fp16.steps.end(), updated);
  ASSERT_NE(second, fp16.steps.end());
  EXPECT_DOUBLE_EQ(second->lr, 0.005);
  const auto fp32 = train("fp32");
  EXPECT_DOUBLE_EQ(fp32.steps[0].lr, 0.0);
  EXPECT_DOUBLE_EQ(fp32.steps[1].lr, 0.005);
}

// Gradients that overflow even at the minimum scale stop the run after
// LossScaler::kMaxSkipsAtMinScale steps, naming the key, instead of skipping forever.
// A user's run, not a bug: an InputError without a source location, whose advice fits the
// recipe (clipping is suggested only where it is off).
TEST(MixedPrecision, Fp16OverflowingAtTheMinimumScaleAborts) {
  for (const double clip : {1.0, 0.0}) {
    SCOPED_TRACE(clip);
    try {
      train("fp16", nullptr, nullptr, ", initial_loss_scale: 1.0e30, min_loss_scale: 1.0e30",
            concat(", clip_grad: ", clip));
      ADD_FAILURE() << "trained although every step overflowed";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_THAT(what, ::testing::HasSubstr("training.min_loss_scale"));
      EXPECT_THAT(what, ::testing::HasSubstr("10 consecutive fp16 steps"));
      EXPECT_THAT(what, ::testing::Not(::testing::HasSubstr("[check")));
      if (clip > 0.0)
        EXPECT_THAT(what, ::testing::HasSubstr("already clipped: optimizer.clip_grad"));
      else
        EXPECT_THAT(what, ::testing::HasSubstr("enable clipping (optimizer.clip_grad)"));
    }
  }
}

}  // namespace
}  // namespace megatron
