// mpirun-np: 2
// Resharding on load: a checkpoint saved by one layout (tp, pp, dp with the distributed
// optimizer, or a single process) loads into another, optimizer state included, and training
// continues on the loss curve of the uninterrupted single-process run (fp32 round-off).
#include <filesystem>
#include <random>
#include <sstream>

#include "megatron/parallel/mesh.h"
#include "megatron/training/trainer.h"
#include "parallel_test.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace mp = megatron::parallel;
using mp::testing::world;

class SyntheticSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 16; }
  int64_t samples_per_epoch() const override { return 1 << 20; }
  void get(int64_t index, int32_t* tokens) const override {
    std::mt19937 rng(static_cast<uint32_t>(index * 31 + 5));
    for (int64_t t = 0; t <= 16; ++t) tokens[t] = static_cast<int32_t>(rng() % 37);
  }
};

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1;
  bool distributed = false;
  int64_t ranks() const { return tp * pp * dp; }
  std::string name() const {
    return "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
           (distributed ? " distopt" : "");
  }
};

training::TrainSummary run(const Layout& l, int64_t iters, const std::string& save,
                           const std::string& load) {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
       " make_vocab_size_divisible_by: 8}\n"
    << "parallel: {tensor: " << l.tp << ", pipeline: " << l.pp << "}\n"
    << "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: " << iters
    << ", seed: 4, peak_tflops: 1.0}\n"
       "optimizer: {lr: 0.005, min_lr: 0.0005, distributed: "
    << (l.distributed ? "true" : "false")
    << ", schedule: {warmup_iters: 2, decay_iters: 10}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "checkpoint: {save: "
    << (save.empty() ? "null" : save) << ", load: " << (load.empty() ? "null" : load) << "}\n"
    << "logging: {interval: 1000}\n";
  const config::Recipe recipe = config::parse_recipe_string(y.str(), "reshard.yaml");
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  if (l.ranks() == 1) {
    auto self = mp::make_single_process_communicator();
    return training::Trainer(recipe, 37, src, nullptr, {self.get(), self.get(), self.get()}, log)
        .run();
  }
  mp::MeshSizes sizes;
  sizes.tp = l.tp;
  sizes.pp = l.pp;
  sizes.dp = l.dp;
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  return training::Trainer(
             recipe, 37, src, nullptr,
             {&mesh.world(), &mesh.tp(), &mesh.dp(), &mesh.pp(), &mesh.embedding(), &mesh.model()},
             log)
      .run();
}

TEST(CheckpointReshard, AnyLayoutLoadsAnyOther) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  const auto reference = run({}, 10, "", "");
  // One directory for all ranks: rank 0's pid, broadcast.
  int64_t id = world().rank() == 0 ? ::getpid() : 0;
  Tensor id_t = Tensor::wrap(&id, {1}, DType::I64);
  world().broadcast(id_t, 0);
  const fs::path base = fs::temp_directory_path() / ("megatron_reshard_" + std::to_string(id));
  const Layout single{}, tp2{2, 1, 1}, pp2{1, 2, 1}, dp2_dist{1, 1, 2, true}, dp2{1, 1, 2};
  const std::vector<std::pair<Layout, Layout>> cases = {
      {tp2, single},      {single, tp2}, {pp2, single},   {dp2_dist, single},
      {single, dp2_dist}, {tp2, pp2},    {dp2_dist, tp2}, {pp2, dp2}};
  int index = 0;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(from.name() + " -> " + to.name());
    const std::string dir = (base / std::to_string(index++)).string();
    // A single-process save is made by rank 0 alone; the others wait for it.
    if (from.ranks() == 1) {
      if (world().rank() == 0) run(from, 5, dir, "");
      world().barrier();
    } else {
      run(from, 5, dir, "");
    }
    const auto resumed = run(to, 10, "", dir);
    ASSERT_EQ(resumed.start_iteration, 5);
    ASSERT_EQ(resumed.steps.size(), 5u);
    for (size_t i = 0; i < resumed.steps.size(); ++i) {
      const auto& want = reference.steps[5 + i];
      EXPECT_NEAR(resumed.steps[i].loss, want.loss, 2e-5 * want.loss) << "iteration " << 6 + i;
      EXPECT_NEAR(resumed.steps[i].grad_norm, want.grad_norm, 2e-4 * want.grad_norm + 1e-6)
          << "iteration " << 6 + i;
    }
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(base);
}

}  // namespace
}  // namespace megatron
