// mpirun-np: 2
// Resharding on load: a checkpoint saved by one layout (tp, pp, dp with the distributed
// optimizer, cp, or a single process) loads into another, optimizer state included, and training
// continues on the loss curve of the uninterrupted single-process run (fp32 round-off); a
// context-parallel run resumed in its own layout continues bit for bit.

#include <filesystem>

#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1;
  bool distributed = false;
  int64_t cp = 1;
  std::string cp_comm = {};
  int64_t ranks() const { return tp * pp * dp * cp; }
  std::string name() const {
    return "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
           (distributed ? " distopt" : "") + (cp > 1 ? " cp" + std::to_string(cp) + cp_comm : "");
  }
};

training::TrainSummary run(const Layout& l, int64_t iters, const std::string& save,
                           const std::string& load) {
  eq::RecipeSpec s;
  s.tp = l.tp;
  s.pp = l.pp;
  s.distributed = l.distributed;
  s.cp = l.cp;
  s.cp_comm = l.cp_comm;
  s.micro = 2;
  s.iters = iters;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.seed = 4;
  s.weight_decay = 0.01;
  s.clip_grad = 1.0;
  s.warmup = 2;
  s.decay_iters = 10;
  s.save = save;
  s.load = load;
  const config::Recipe recipe = eq::make_recipe(s, "reshard.yaml");
  auto src = std::make_shared<eq::SyntheticTokens>(
      eq::TokenRule{.seed_mul = 31, .seed_add = 5, .uniform = true});
  return l.ranks() == 1 ? eq::train_single(recipe, src, nullptr)
                        : eq::train_on_world(recipe, src, nullptr);
}

TEST(CheckpointReshard, AnyLayoutLoadsAnyOther) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  const auto reference = run({}, 10, "", "");
  const fs::path base = eq::shared_scratch_path("megatron_reshard_");
  const Layout single{}, tp2{2, 1, 1}, pp2{1, 2, 1}, dp2_dist{1, 1, 2, true}, dp2{1, 1, 2};
  std::vector<std::pair<Layout, Layout>> cases = {
      {tp2, single},      {single, tp2}, {pp2, single},   {dp2_dist, single},
      {single, dp2_dist}, {tp2, pp2},    {dp2_dist, tp2}, {pp2, dp2}};
  const Layout cp2{.cp = 2, .cp_comm = "p2p"}, cp2_a2a{.cp = 2, .cp_comm = "a2a"};
  for (const auto& c : std::vector<std::pair<Layout, Layout>>{
           {cp2, single}, {single, cp2_a2a}, {cp2_a2a, tp2}, {dp2_dist, cp2}})
    cases.push_back(c);
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
    eq::expect_same_steps(resumed.steps, reference.steps, 5);
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(base);
  eq::report_max_diff("checkpoint reshard");
}

TEST(CheckpointReshard, ContextParallelResumesBitForBit) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  const fs::path base = eq::shared_scratch_path("megatron_cp_resume_");
  for (const std::string comm : {"p2p", "all_gather", "a2a"}) {
    SCOPED_TRACE("cp2 " + comm);
    const Layout cp2{.cp = 2, .cp_comm = comm};
    const auto straight = run(cp2, 10, "", "");
    const std::string dir = (base / comm).string();
    run(cp2, 5, dir, "");
    const auto resumed = run(cp2, 10, "", dir);
    ASSERT_EQ(resumed.steps.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(resumed.steps[i].loss, straight.steps[5 + i].loss) << "step " << 6 + i;
      EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[5 + i].grad_norm) << "step " << 6 + i;
    }
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(base);
}

}  // namespace
}  // namespace megatron
