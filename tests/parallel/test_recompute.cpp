// mpirun-np: 2
// Activation recomputation under model parallelism: tensor parallelism with sequence
// parallelism (checkpoints are the sequence slices) and pipeline parallelism (1F1B and
// interleaved: several micro-batches in flight share one workspace while the schedule
// interleaves their forwards and backwards) with recompute full or selective reproduce the
// single-process loss curve without recomputation, and equal the same layout without
// recomputation exactly.
#include <map>
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
          static_cast<int32_t>((5 * tokens[t - 1] + (rng() % 4 == 0 ? rng() % 37 : 1)) % 37);
  }
};

struct Layout {
  int64_t tp, pp, vpp;
  bool sp;
  std::string arch = "gpt";
  std::string name() const {
    std::ostringstream o;
    o << arch << " tp" << tp << " pp" << pp << " vpp" << vpp << (sp ? " sp" : "");
    return o.str();
  }
};

config::Recipe recipe(const Layout& l, const std::string& recompute) {
  std::ostringstream y;
  y << "model: {arch: " << l.arch
    << ", num_layers: 4, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
       " make_vocab_size_divisible_by: 8";
  if (l.arch == "llama")
    y << ", num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, activation: swiglu,"
         " position_embedding: rope, tie_embeddings: false, add_bias: false";
  else
    y << ", hidden_dropout: 0.1, attention_dropout: 0.1";
  y << "}\nparallel: {tensor: " << l.tp << ", pipeline: " << l.pp
    << ", sequence_parallel: " << (l.sp ? "true" : "false");
  if (l.vpp > 1) y << ", virtual_pipeline: " << l.vpp;
  y << "}\ntraining: {micro_batch_size: 2, global_batch_size: 8, train_iters: 6, eval_interval: 3,"
       " eval_iters: 1, seed: 13, peak_tflops: 1.0, recompute: "
    << recompute
    << "}\n"
       "optimizer: {lr: 0.005, weight_decay: 0.1, clip_grad: 1.0, schedule: {warmup_iters: 2}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 1000}\n";
  return config::parse_recipe_string(y.str(), "recompute_parallel.yaml");
}

training::TrainSummary train(const config::Recipe& r, training::TrainerGroups groups) {
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  training::Trainer t(r, 37, src, src, groups, log);
  return t.run();
}

training::TrainSummary train_single(const Layout& l, const std::string& recompute) {
  auto self = mp::make_single_process_communicator();
  Layout single = l;
  single.tp = single.pp = single.vpp = 1;
  single.sp = false;
  return train(recipe(single, recompute), {self.get(), self.get(), self.get()});
}

training::TrainSummary train_layout(const Layout& l, const std::string& recompute) {
  mp::MeshSizes sizes;
  sizes.tp = l.tp;
  sizes.pp = l.pp;
  sizes.dp = world().size() / (l.tp * l.pp);
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  return train(recipe(l, recompute), training::TrainerGroups::from_mesh(mesh));
}

void expect_close(const training::TrainSummary& want, const training::TrainSummary& got) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, 2e-5 * want.steps[i].loss)
        << "step " << i + 1;
    EXPECT_NEAR(got.steps[i].grad_norm, want.steps[i].grad_norm,
                2e-4 * want.steps[i].grad_norm + 1e-6)
        << "step " << i + 1;
  }
  ASSERT_EQ(got.evals.size(), want.evals.size());
  for (size_t i = 0; i < got.evals.size(); ++i)
    EXPECT_NEAR(got.evals[i].loss, want.evals[i].loss, 2e-5 * want.evals[i].loss);
}

void expect_equal(const training::TrainSummary& want, const training::TrainSummary& got) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(got.steps[i].grad_norm, want.steps[i].grad_norm) << "step " << i + 1;
  }
}

TEST(Recompute, ModelParallelMatchesSingleProcessWithout) {
  ASSERT_EQ(world().size(), 2) << "written for 2 ranks";
  const std::vector<std::pair<Layout, std::string>> cases = {
      {{2, 1, 1, true}, "full"},          {{2, 1, 1, true}, "selective"},
      {{1, 2, 1, false}, "full"},         {{1, 2, 2, false}, "full"},
      {{2, 1, 1, true, "llama"}, "full"}, {{1, 2, 1, false, "llama"}, "selective"},
  };
  std::map<std::string, training::TrainSummary> references;
  for (const auto& [layout, mode] : cases) {
    SCOPED_TRACE(layout.name() + " recompute " + mode);
    if (!references.count(layout.arch)) {
      references[layout.arch] = train_single(layout, "none");
      const auto& ref = references[layout.arch];
      EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss);
    }
    const auto without = train_layout(layout, "none");
    const auto with = train_layout(layout, mode);
    expect_close(references[layout.arch], with);
    expect_equal(without, with);  // same layout: recomputation changes no bit
  }
}

}  // namespace
}  // namespace megatron
