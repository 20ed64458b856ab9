// mpirun-np: 2 4 8
// Pipeline parallelism (1F1B and interleaved), alone and combined with tensor (+ sequence)
// parallelism, data parallelism and the distributed optimizer, reproduces the single-process
// loss curve over 20 steps within fp32 round-off. Tied embeddings on the first and last stage
// exercise the embedding-group reduction; dropout exercises layout-independent masks.
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
    std::mt19937 rng(static_cast<uint32_t>(index * 104729 + 11));
    tokens[0] = static_cast<int32_t>(rng() % 37);
    for (int64_t t = 1; t <= 16; ++t)
      tokens[t] =
          static_cast<int32_t>((7 * tokens[t - 1] + (rng() % 4 == 0 ? rng() % 37 : 3)) % 37);
  }
};

struct Layout {
  int64_t tp, pp, dp, vpp, micro;
  bool sp, distributed;
  std::vector<int64_t> stage_layers = {};  // explicit (uneven) split
  std::string name() const {
    std::ostringstream o;
    o << "tp" << tp << " pp" << pp << " dp" << dp << " vpp" << vpp << " micro" << micro
      << (sp ? " sp" : "") << (distributed ? " distopt" : "");
    for (int64_t n : stage_layers) o << " " << n;
    return o.str();
  }
};

config::Recipe recipe(const Layout& l) {
  std::ostringstream y;
  y << "model: {num_layers: 8, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
       " make_vocab_size_divisible_by: 8, hidden_dropout: 0.1, attention_dropout: 0.1}\n"
    << "parallel: {tensor: " << l.tp << ", pipeline: " << l.pp
    << ", sequence_parallel: " << (l.sp ? "true" : "false");
  if (l.vpp > 1) y << ", virtual_pipeline: " << l.vpp;
  if (!l.stage_layers.empty()) {
    y << ", pipeline_layers: [";
    for (size_t i = 0; i < l.stage_layers.size(); ++i) y << (i ? ", " : "") << l.stage_layers[i];
    y << "]";
  }
  y << "}\n"
    << "training: {micro_batch_size: " << l.micro
    << ", global_batch_size: 8, train_iters: 20, eval_interval: 10, eval_iters: 1, seed: 21,"
       " peak_tflops: 1.0}\n"
       "optimizer: {lr: 0.005, min_lr: 0.0005, weight_decay: 0.1, clip_grad: 0.5, distributed: "
    << (l.distributed ? "true" : "false")
    << ", schedule: {warmup_iters: 3}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 1000}\n";
  return config::parse_recipe_string(y.str(), "pp_equivalence.yaml");
}

training::TrainSummary train(const config::Recipe& r, training::TrainerGroups groups) {
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  training::Trainer t(r, 37, src, src, groups, log);
  return t.run();
}

TEST(PipelineParallel, MatchesSingleProcess) {
  auto self = mp::make_single_process_communicator();
  const auto reference =
      train(recipe({1, 1, 1, 1, 8, false, false}), {self.get(), self.get(), self.get()});
  EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);
  const int64_t n = world().size();
  const std::vector<Layout> layouts = {{1, 2, 1, 1, 2, false, false},
                                       {1, 2, 1, 2, 2, false, false},
                                       {1, 4, 1, 1, 1, false, false},
                                       {1, 4, 1, 2, 1, false, false},
                                       {2, 2, 1, 1, 2, true, false},
                                       {1, 2, 2, 1, 2, false, true},
                                       {2, 2, 2, 1, 1, true, true},
                                       {2, 2, 2, 2, 2, false, false},
                                       {1, 8, 1, 1, 1, false, false},
                                       {1, 2, 1, 1, 2, false, false, {3, 5}},
                                       {1, 4, 1, 1, 1, false, false, {1, 3, 3, 1}}};
  int ran = 0;
  for (const Layout& l : layouts) {
    if (l.tp * l.pp * l.dp != n) continue;
    SCOPED_TRACE(l.name());
    mp::MeshSizes sizes;
    sizes.tp = l.tp;
    sizes.pp = l.pp;
    sizes.dp = l.dp;
    mp::Mesh mesh(sizes, world(), mp::testing::launch());
    const auto got = train(recipe(l), {&mesh.world(), &mesh.tp(), &mesh.dp(), &mesh.pp(),
                                       &mesh.embedding(), &mesh.model()});
    ++ran;
    ASSERT_EQ(got.steps.size(), reference.steps.size());
    for (size_t i = 0; i < got.steps.size(); ++i) {
      EXPECT_NEAR(got.steps[i].loss, reference.steps[i].loss, 2e-5 * reference.steps[i].loss)
          << "step " << i + 1;
      EXPECT_NEAR(got.steps[i].grad_norm, reference.steps[i].grad_norm,
                  2e-4 * reference.steps[i].grad_norm + 1e-6)
          << "step " << i + 1;
    }
    ASSERT_EQ(got.evals.size(), reference.evals.size());
    for (size_t i = 0; i < got.evals.size(); ++i)
      EXPECT_NEAR(got.evals[i].loss, reference.evals[i].loss, 2e-5 * reference.evals[i].loss);
  }
  EXPECT_GT(ran, 0) << "no layout for " << n << " ranks";
}

}  // namespace
}  // namespace megatron
