// mpirun-np: 2
// A signal that reaches one rank only (SIGUSR1 on the last) stops every rank at the same step,
// and every rank names that signal as the reason: rank 0 on the console, the others on stderr
// (before, rank 0 blamed exit_duration_minutes).
#include <csignal>

#include "equivalence_fixture.h"
#include "megatron/training/signals.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

TEST(StopSignal, EveryRankStopsAtTheSameStepNamingTheSignal) {
  eq::RecipeSpec s;
  s.micro = 2;
  s.eval_interval = 0;
  config::Recipe r = eq::make_recipe(s, "stop_signal.yaml");
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 17, 3, 1});
  mp::MeshSizes sizes;
  sizes.dp = world().size();
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  training::install_exit_signal_handlers();
  if (world().rank() == world().size() - 1) std::raise(SIGUSR1);
  std::ostringstream log;
  training::TrainSummary summary;
  {
    training::Trainer t(r, eq::kVocab, src, src, training::TrainerGroups::from_mesh(mesh), log);
    summary = t.run();
  }
  training::reset_exit_signal();
  EXPECT_TRUE(summary.stopped_early);
  EXPECT_EQ(summary.last_iteration, 1);
  if (world().rank() == 0) {
    EXPECT_NE(log.str().find("stopping at iteration 1 (SIGUSR1 received)"), std::string::npos)
        << log.str();
  }
}

}  // namespace
}  // namespace megatron
