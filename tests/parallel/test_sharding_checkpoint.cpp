// mpirun-np: 2 4
// Checkpoints across data-parallel sharding strategies: a checkpoint saved under one strategy and
// dp size (ZeRO-3's weights, masters and moments each written as the ranks' owned segments)
// loads under any other, optimizer state included, and training continues on the loss curve of
// the uninterrupted single-process run (fp32 round-off; bf16 within its tolerance). Resuming at
// the same layout is bit-exact for every strategy.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "equivalence_fixture.h"
#include "megatron/checkpoint/directory.h"
#include "megatron/inference/causal_lm.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

// A layout of the whole world (ranks 0: one process) and its strategy.
struct RunLayout {
  int64_t tp = 1, pp = 1;
  std::string sharding = "no_shard";
  int64_t instances = 1;
  int64_t cp = 1;       // parallel.context
  bool single = false;  // rank 0 alone
  std::string name() const {
    return (single ? std::string("single") : concat("world tp", tp, " pp", pp)) + " " + sharding +
           (instances > 1 ? concat(" x", instances) : std::string()) +
           (cp > 1 ? concat(" cp", cp) : std::string());
  }
};

training::TrainSummary run(const RunLayout& l, int64_t iters, const std::string& save,
                           const std::string& load, const std::string& precision = "fp32",
                           const std::string& checkpoint_extra = "") {
  eq::RecipeSpec s;
  s.layers = 4;
  s.tp = l.tp;
  s.pp = l.pp;
  s.sharding = l.sharding;
  s.dp_instances = l.instances;
  s.cp = l.cp;
  s.micro = 1;
  s.iters = iters;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.seed = 4;
  s.weight_decay = 0.01;
  s.clip_grad = 1.0;
  s.warmup = 2;
  s.decay_iters = 10;
  s.precision = precision;
  s.save = save;
  s.load = load;
  s.checkpoint_extra = checkpoint_extra;
  if (l.single) s.micro = 8;
  const config::Recipe recipe = eq::make_recipe(s, "sharding_checkpoint.yaml");
  auto src = std::make_shared<eq::SyntheticTokens>(
      eq::TokenRule{.seed_mul = 31, .seed_add = 5, .uniform = true});
  return l.single ? eq::train_single(recipe, src, nullptr)
                  : eq::train_on_world(recipe, src, nullptr);
}

// Runs `l` (rank 0 alone when single; the others wait).
training::TrainSummary run_on(const RunLayout& l, int64_t iters, const std::string& save,
                              const std::string& load, const std::string& precision = "fp32") {
  training::TrainSummary out;
  if (!l.single || world().rank() == 0) out = run(l, iters, save, load, precision);
  if (l.single) world().barrier();
  return out;
}

void expect_conversions(const std::vector<std::pair<RunLayout, RunLayout>>& cases,
                        const std::string& precision, const eq::Tolerance& tol) {
  const auto reference = run(RunLayout{.single = true}, 10, "", "", precision);
  const fs::path base = eq::shared_scratch_path("megatron_sharding_ckpt_");
  int index = 0;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(from.name() + " -> " + to.name());
    const std::string dir = (base / std::to_string(index++)).string();
    run_on(from, 5, dir, "", precision);
    const auto resumed = run_on(to, 10, "", dir, precision);
    if (!to.single || world().rank() == 0) {
      ASSERT_EQ(resumed.start_iteration, 5);
      ASSERT_EQ(resumed.steps.size(), 5u);
      eq::expect_same_steps(resumed.steps, reference.steps, 5, tol);
    }
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(base);
}

TEST(ShardingCheckpoint, EveryStrategyLoadsEveryOther) {
  const RunLayout single{.single = true}, zero1{.sharding = "optim"},
      zero2{.sharding = "optim_grads"}, zero3{.sharding = "optim_grads_params"}, plain{};
  std::vector<std::pair<RunLayout, RunLayout>> cases = {
      {zero3, single}, {single, zero3}, {zero2, zero3},  {zero3, zero1},
      {zero1, zero2},  {zero3, plain},  {zero2, single},
  };
  if (world().size() == 2) {
    cases.push_back({zero3, RunLayout{.tp = 2}});
    cases.push_back({RunLayout{.pp = 2}, zero3});
  } else {
    const RunLayout hybrid3{.sharding = "optim_grads_params", .instances = 2};
    cases.push_back({zero3, hybrid3});
    cases.push_back({hybrid3, RunLayout{.pp = 2, .sharding = "optim"}});
    cases.push_back({RunLayout{.tp = 2, .sharding = "optim_grads"}, zero3});
    cases.push_back({zero3, RunLayout{.tp = 2, .pp = 2}});
    // Hybrid sharding with cp: shards over one instance's dp x cp ranks.
    cases.push_back({RunLayout{.sharding = "optim_grads_params", .instances = 2, .cp = 2}, single});
    cases.push_back({zero3, RunLayout{.sharding = "optim", .instances = 2, .cp = 2}});
  }
  expect_conversions(cases, "fp32", {});
  eq::report_max_diff("sharding checkpoint conversions");
}

// bf16: the fp32 masters (sharded by every strategy but no_shard) carry the state across.
TEST(ShardingCheckpoint, Bf16MastersConvert) {
  const RunLayout single{.single = true}, zero3{.sharding = "optim_grads_params"},
      zero1{.sharding = "optim"};
  expect_conversions({{zero3, single}, {single, zero3}, {zero1, zero3}}, "bf16",
                     eq::Tolerance{2e-3, 3e-2});
  eq::report_max_diff("bf16 sharding checkpoint conversions");
}

// Same layout, same strategy: the resumed steps are the uninterrupted run's, bit for bit.
TEST(ShardingCheckpoint, ResumeIsBitExactForEveryStrategy) {
  const fs::path base = eq::shared_scratch_path("megatron_sharding_resume_");
  int index = 0;
  for (const std::string strategy : {"optim", "optim_grads", "optim_grads_params"}) {
    for (const std::string precision : {"fp32", "bf16"}) {
      const RunLayout l{.sharding = strategy};
      SCOPED_TRACE(l.name() + " " + precision);
      const auto straight = run(l, 8, "", "", precision);
      const std::string dir = (base / std::to_string(index++)).string();
      run(l, 4, dir, "", precision);
      const auto resumed = run(l, 8, "", dir, precision);
      ASSERT_EQ(resumed.steps.size(), 4u);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 4].loss) << "step " << i + 5;
        EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[i + 4].grad_norm) << "step " << i + 5;
      }
      world().barrier();
    }
  }
  if (world().rank() == 0) fs::remove_all(base);
}

// checkpoint.async_save under ZeRO-3 (and no sharding): saves every 2 steps written in the
// background while training continues, the last one waited for at the end; resuming from the
// newest is bit-exact, and the checkpoint holds the same bytes as a synchronous save's.
TEST(ShardingCheckpoint, AsyncSaveResumeIsBitExact) {
  const fs::path base = eq::shared_scratch_path("megatron_async_resume_");
  int index = 0;
  for (const std::string strategy : {"optim_grads_params", "no_shard"}) {
    const RunLayout l{.sharding = strategy};
    SCOPED_TRACE(l.name());
    const auto straight = run(l, 8, "", "");
    const std::string async_dir = (base / std::to_string(index++)).string();
    const std::string sync_dir = (base / std::to_string(index++)).string();
    run(l, 4, async_dir, "", "fp32", ", save_interval: 2, async_save: true");
    run(l, 4, sync_dir, "", "fp32", ", save_interval: 2");
    EXPECT_EQ(checkpoint::latest_iteration(async_dir), std::optional<int64_t>(4));
    const auto resumed = run(l, 8, "", async_dir);
    ASSERT_EQ(resumed.steps.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 4].loss) << "step " << i + 5;
      EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[i + 4].grad_norm) << "step " << i + 5;
    }
    world().barrier();
    const std::string shard = concat("iter_0000004/shard_", world().rank(), ".safetensors");
    auto bytes = [](const fs::path& p) {
      std::ifstream f(p, std::ios::binary);
      std::ostringstream s;
      s << f.rdbuf();
      return s.str();
    };
    if (fs::exists(fs::path(sync_dir) / shard)) {
      EXPECT_EQ(bytes(fs::path(async_dir) / shard), bytes(fs::path(sync_dir) / shard)) << shard;
    }
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(base);
}

// A ZeRO-3 checkpoint (weights written as every rank's owned segments) serves inference like a
// whole one: CausalLM assembles the tensors, keeps the learned position table at its trained
// size for a shorter generation length, and gives the logits of the no_shard run's checkpoint.
TEST(ShardingCheckpoint, Zero3CheckpointServesInference) {
  const fs::path base = eq::shared_scratch_path("megatron_sharding_infer_");
  const std::string zero3 = (base / "zero3").string(), whole = (base / "whole").string();
  run(RunLayout{.sharding = "optim_grads_params"}, 3, zero3, "");
  run(RunLayout{}, 3, whole, "");
  auto self = mp::make_single_process_communicator();
  const inference::CausalLM a(zero3, std::nullopt, *self, 6), b(whole, std::nullopt, *self, 6);
  EXPECT_EQ(a.max_length(), 6);
  Tensor tokens = Tensor::empty({6, 1}, DType::I32);
  for (int i = 0; i < 6; ++i) tokens.data<int32_t>()[i] = (7 * i + 3) % eq::kVocab;
  const Tensor la = a.forward(tokens).logits, lb = b.forward(tokens).logits;
  ASSERT_EQ(la.numel(), lb.numel());
  for (int64_t i = 0; i < la.numel(); ++i)
    ASSERT_NEAR(la.data<float>()[i], lb.data<float>()[i], 1e-4) << i;
  world().barrier();
  if (world().rank() == 0) fs::remove_all(base);
}

}  // namespace
}  // namespace megatron
