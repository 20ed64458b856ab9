// mpirun-np: 2
// MoE checkpoints: expert tensors are saved under their global expert index
// ("layers.L.mlp.experts.E.fc1.weight"), so a checkpoint saved at one expert / tensor / pipeline
// layout (context parallel ones included) loads at another, optimizer state and the aux-loss-free
// expert bias included, and training continues on the loss curve (router losses and bias-driven
// routing included) of the uninterrupted single-process run; resuming in the same layout is
// bit-exact.

#include <filesystem>

#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

training::TrainSummary run(const eq::Layout& l, int64_t iters, const std::string& save,
                           const std::string& load) {
  eq::RecipeSpec s{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  s.model_extra =
      "num_experts: 4, moe_ffn_hidden_size: 24, moe_router_topk: 2, "
      "moe_router_score_function: sigmoid, moe_aux_loss_coeff: 0.01, moe_z_loss_coeff: 0.001, "
      "moe_router_enable_expert_bias: true, moe_router_bias_update_rate: 0.01";
  s = l.applied_to(s);
  s.iters = iters;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.seed = 4;
  s.decay_iters = 10;
  s.save = save;
  s.load = load;
  const config::Recipe recipe = eq::make_recipe(s, "moe_checkpoint.yaml");
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  return l.ranks() == 1 ? eq::train_single(recipe, src, nullptr)
                        : eq::train_on_world(recipe, src, nullptr);
}

TEST(MoeCheckpoint, AnyLayoutLoadsAnyOther) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  const eq::Layout single{.micro = 2}, ep2{.dp = 2, .micro = 2, .ep = 2},
      ep2_dist{.dp = 2, .micro = 2, .distributed = true, .ep = 2},
      tp2{.tp = 2, .micro = 2, .sp = true}, pp2{.pp = 2, .micro = 2},
      dp2_dist{.dp = 2, .micro = 2, .distributed = true},
      // whole experts over the tp ranks (expert_tensor 1), with the distributed optimizer
      tp2_etp1{.tp = 2, .micro = 2, .sp = true, .distributed = true, .ep = 2, .etp = 1},
      // ep carved out of cp: the two cp ranks of a sequence hold different experts
      cp2_ep2{.micro = 2, .distributed = true, .ep = 2, .cp = 2, .cp_comm = "p2p"};
  const auto reference = run(single, 10, "", "");
  const fs::path base = eq::shared_scratch_path("megatron_moe_ckpt_");
  const std::vector<std::pair<eq::Layout, eq::Layout>> cases = {
      {ep2_dist, single}, {single, ep2},      {ep2, tp2},           {tp2, ep2_dist},
      {pp2, ep2},         {ep2, pp2},         {ep2_dist, dp2_dist}, {tp2, tp2_etp1},
      {tp2_etp1, ep2},    {tp2_etp1, single}, {cp2_ep2, ep2_dist},  {ep2, cp2_ep2},
      {cp2_ep2, single}};
  int index = 0;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(from.name() + " -> " + to.name());
    const std::string dir = (base / std::to_string(index++)).string();
    if (from.ranks() == 1) {
      if (world().rank() == 0) run(from, 5, dir, "");
      world().barrier();
    } else {
      run(from, 5, dir, "");
    }
    const auto resumed = to.ranks() == 1 && world().rank() != 0 ? reference : run(to, 10, "", dir);
    world().barrier();
    if (to.ranks() == 1 && world().rank() != 0) continue;
    ASSERT_EQ(resumed.start_iteration, 5);
    ASSERT_EQ(resumed.steps.size(), 5u);
    eq::expect_same_steps(resumed.steps, reference.steps, 5);
  }
  if (world().rank() == 0) fs::remove_all(base);
  eq::report_max_diff("moe checkpoint reshard");
}

// Same layout, save at 5 and resume: bit-identical losses, router losses and gradient norms
// (experts over dp, whole experts over the tp ranks, and experts over the cp ranks).
TEST(MoeCheckpoint, ResumeInTheSameLayoutIsBitExact) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  for (const eq::Layout& l :
       {eq::Layout{.dp = 2, .micro = 2, .distributed = true, .ep = 2},
        eq::Layout{.tp = 2, .micro = 2, .sp = true, .distributed = true, .ep = 2, .etp = 1},
        eq::Layout{.micro = 2, .distributed = true, .ep = 2, .cp = 2, .cp_comm = "a2a"}}) {
    SCOPED_TRACE(l.name());
    const auto uninterrupted = run(l, 10, "", "");
    const fs::path dir = eq::shared_scratch_path("megatron_moe_resume_");
    run(l, 5, dir.string(), "");
    const auto resumed = run(l, 10, "", dir.string());
    ASSERT_EQ(resumed.steps.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      const auto &got = resumed.steps[i], &want = uninterrupted.steps[5 + i];
      EXPECT_EQ(got.loss, want.loss) << "iteration " << want.iteration;
      EXPECT_EQ(got.grad_norm, want.grad_norm) << "iteration " << want.iteration;
      EXPECT_EQ(got.moe_aux_loss, want.moe_aux_loss) << "iteration " << want.iteration;
      EXPECT_EQ(got.moe_z_loss, want.moe_z_loss) << "iteration " << want.iteration;
    }
    world().barrier();
    if (world().rank() == 0) fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace megatron
