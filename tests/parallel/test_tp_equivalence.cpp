// mpirun-np: 2 4 8
// Tensor parallelism, with and without sequence parallelism, and with data parallelism on the
// remaining ranks, reproduces the single-process loss curve over 20 steps within fp32
// round-off, for a GPT (learned positions, tied embeddings, dropout on) and a LLaMA-style model
// (RMSNorm, SwiGLU, RoPE, GQA, untied).
#include <random>
#include <sstream>

#include "megatron/parallel/mesh.h"
#include "megatron/training/trainer.h"
#include "parallel_test.h"

namespace megatron {
namespace {

namespace mp = megatron::parallel;
using mp::testing::world;

class SyntheticSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 16; }
  int64_t samples_per_epoch() const override { return 1 << 20; }
  void get(int64_t index, int32_t* tokens) const override {
    std::mt19937 rng(static_cast<uint32_t>(index * 7919 + 3));
    tokens[0] = static_cast<int32_t>(rng() % 37);
    for (int64_t t = 1; t <= 16; ++t)
      tokens[t] =
          static_cast<int32_t>((5 * tokens[t - 1] + (rng() % 4 == 0 ? rng() % 37 : 2)) % 37);
  }
};

const char* kGpt =
    "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
    " make_vocab_size_divisible_by: 8, hidden_dropout: 0.1, attention_dropout: 0.1}\n";
const char* kLlama =
    "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, num_query_groups: 2,"
    " ffn_hidden_size: 48, seq_length: 16, normalization: rmsnorm, activation: swiglu,"
    " position_embedding: rope, add_bias: false, tie_embeddings: false,"
    " make_vocab_size_divisible_by: 8}\n";

config::Recipe recipe(const char* model, int64_t tp, int64_t micro, bool sp = false) {
  std::ostringstream y;
  y << model << "parallel: {tensor: " << tp << ", sequence_parallel: " << (sp ? "true" : "false")
    << "}\n"
    << "training: {micro_batch_size: " << micro
    << ", global_batch_size: 8, train_iters: 20, eval_interval: 10, eval_iters: 1, seed: 9,"
       " peak_tflops: 1.0}\n"
       "optimizer: {lr: 0.005, min_lr: 0.0005, weight_decay: 0.1, clip_grad: 0.5,"
       " schedule: {warmup_iters: 3}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 1000}\n";
  return config::parse_recipe_string(y.str(), "tp_equivalence.yaml");
}

training::TrainSummary train(const config::Recipe& r, training::TrainerGroups groups) {
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  training::Trainer t(r, 37, src, src, groups, log);
  return t.run();
}

void expect_same_curve(const training::TrainSummary& got, const training::TrainSummary& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, 2e-5 * want.steps[i].loss) << "step " << i;
    EXPECT_NEAR(got.steps[i].grad_norm, want.steps[i].grad_norm,
                2e-4 * want.steps[i].grad_norm + 1e-6)
        << "step " << i;
  }
  ASSERT_EQ(got.evals.size(), want.evals.size());
  for (size_t i = 0; i < got.evals.size(); ++i)
    EXPECT_NEAR(got.evals[i].loss, want.evals[i].loss, 2e-5 * want.evals[i].loss);
}

TEST(TensorParallel, MatchesSingleProcess) {
  auto self = mp::make_single_process_communicator();
  const int world_size = world().size();
  for (const char* model : {kGpt, kLlama}) {
    const auto reference = train(recipe(model, 1, 8), {self.get(), self.get(), self.get()});
    EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);
    const int64_t max_tp = model == kGpt ? 4 : 2;
    for (int64_t tp = 2; tp <= std::min<int64_t>(max_tp, world_size); tp *= 2) {
      if (world_size % tp != 0) continue;
      const int64_t dp = world_size / tp;
      if (8 % dp != 0) continue;
      SCOPED_TRACE(std::string(model == kGpt ? "gpt" : "llama") + " tp=" + std::to_string(tp) +
                   " dp=" + std::to_string(dp));
      mp::MeshSizes sizes;
      sizes.tp = tp;
      sizes.dp = dp;
      mp::Mesh mesh(sizes, world(), mp::testing::launch());
      const int64_t micro = 8 / dp >= 2 ? 2 : 1;
      for (bool sp : {false, true}) {
        SCOPED_TRACE(sp ? "sequence parallel" : "no sequence parallel");
        expect_same_curve(
            train(recipe(model, tp, micro, sp), {&mesh.world(), &mesh.tp(), &mesh.dp()}),
            reference);
      }
    }
  }
}

}  // namespace
}  // namespace megatron
