// mpirun-np: 2 4
// training.rerun_mode across ranks: a transient fault injected on the world's last rank (NaN loss
// and gradients in its first run of iteration 3) is re-run on every rank, the report names that
// rank alone, and the run continues bit for bit as one without the fault; a persistent fault on
// it stops every rank with the same message.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

config::Recipe recipe(config::ErrorInjection injection) {
  eq::RecipeSpec s;
  s.layers = 2;
  s.micro = 1;
  s.iters = 5;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.dropout = 0.1;
  config::Recipe r = eq::make_recipe(s, "rerun.yaml");
  r.training.rerun_mode = config::RerunMode::Validate;
  r.training.error_injection_type = injection;
  r.training.error_injection_iteration = 3;
  r.training.error_injection_rank = world().size() - 1;
  return r;
}

TEST(RerunMpi, TransientFaultOnOneRankIsNamedAndTrainingContinuesExactly) {
  auto src = std::make_shared<eq::SyntheticTokens>();
  const auto clean = eq::train_on_world(recipe(config::ErrorInjection::None), src, nullptr);
  const auto hit = eq::train_on_world(recipe(config::ErrorInjection::Transient), src, nullptr);
  ASSERT_EQ(hit.reruns.size(), 1u);
  EXPECT_NE(hit.reruns[0].find("a transient fault, not the data; the results of rank(s) " +
                               std::to_string(world().size() - 1) + " differed"),
            std::string::npos)
      << hit.reruns[0];
  EXPECT_TRUE(clean.reruns.empty());
  ASSERT_EQ(hit.steps.size(), clean.steps.size());
  for (size_t i = 0; i < clean.steps.size(); ++i) {
    EXPECT_EQ(hit.steps[i].loss, clean.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(hit.steps[i].grad_norm, clean.steps[i].grad_norm) << "step " << i + 1;
  }
}

TEST(RerunMpi, PersistentFaultStopsEveryRankNamingTheRank) {
  auto src = std::make_shared<eq::SyntheticTokens>();
  try {
    eq::train_on_world(recipe(config::ErrorInjection::Persistent), src, nullptr);
    FAIL() << "the run went on";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("iteration 3: non-finite loss nan; re-run on the same data repeated it"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("global samples 16-23"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace megatron
