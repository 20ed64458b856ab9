// Megatron-LM's distributed-optimizer state read per parameter (megatron/mlm/mlm_optimizer.h),
// against checkpoints Megatron-Core saved after 10 training steps on the CPU
// (tests/fixtures/megatron_optim, made by tools/gen_megatron_optimizer_fixtures.py): the grad
// buffer layout computed here is the one Megatron reported (layout.json, from its own
// param_index_map), the three ways of storing the state (torch_dist dp_reshardable and
// fully_reshardable, legacy distrib_optim.pt) give the same tensors, and the fp32 main
// parameters equal the saved weights (fp32 training), over tp 1 and tp 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "megatron/mlm/mlm_checkpoint.h"
#include "megatron/mlm/mlm_optimizer.h"
#include "megatron/mlm/mlm_tensors.h"
#include "tests/support/test_paths.h"
#include "tests/unit/mlm_test_util.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;

fs::path optim_fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "megatron_optim" / name;
}

struct Loaded {
  mlm::MlmCheckpoint ck;
  std::unique_ptr<mlm::MlmTensors> model;
  std::unique_ptr<mlm::MlmOptimizerState> state;
  explicit Loaded(const std::string& name)
      : ck(mlm::open_checkpoint(optim_fixture(name).string(), {})),
        model(std::make_unique<mlm::MlmTensors>(ck)),
        state(std::make_unique<mlm::MlmOptimizerState>(ck, *model)) {}
};

TEST(MegatronOptimizer, TheGradBufferLayoutIsMegatronsOwn) {
  for (const std::string name : {"llama_dp2_torch", "llama_tp2_dp2_torch"}) {
    const Loaded l(name);
    std::ifstream in(optim_fixture(name) / "layout.json");
    const nlohmann::json layout = nlohmann::json::parse(in);
    const auto ours = mlm::flat_layout(l.ck.args, *l.model, l.ck.tp);
    const nlohmann::json& params = layout[0]["buffers"][0]["params"];
    ASSERT_EQ(ours.size(), params.size()) << name;
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].name, params[i]["name"].get<std::string>()) << name << " " << i;
      EXPECT_EQ(ours[i].start, params[i]["start"].get<int64_t>()) << ours[i].name;
      EXPECT_EQ(ours[i].end, params[i]["end"].get<int64_t>()) << ours[i].name;
      EXPECT_EQ(ours[i].local_shape, params[i]["shape"].get<std::vector<int64_t>>())
          << ours[i].name;
    }
    EXPECT_EQ(ours.back().end, layout[0]["buffers"][0]["numel_unpadded"].get<int64_t>());
  }
}

TEST(MegatronOptimizer, EveryWayOfStoringItGivesTheSameState) {
  const Loaded dp("llama_dp2_torch_dist"), full("llama_dp2_torch_dist_fully_reshardable"),
      legacy("llama_dp2_torch");
  EXPECT_EQ(dp.state->sharding(), mlm::OptimizerSharding::DpReshardable);
  EXPECT_EQ(full.state->sharding(), mlm::OptimizerSharding::FullyReshardable);
  EXPECT_EQ(legacy.state->sharding(), mlm::OptimizerSharding::Legacy);
  for (const Loaded* l : {&dp, &full, &legacy}) {
    EXPECT_EQ(l->state->step(), 10.0);
    ASSERT_NE(l->state->scheduler(), nullptr);
    EXPECT_EQ(l->state->scheduler()->get("num_steps")->integer, 80);  // samples
  }
  double moments = 0;
  for (const std::string& n : dp.model->names())
    for (const char* kind : {"param", "exp_avg", "exp_avg_sq"}) {
      const std::vector<float> a = dp.state->read(kind, n);
      EXPECT_EQ(a, full.state->read(kind, n)) << kind << " " << n;
      EXPECT_EQ(a, legacy.state->read(kind, n)) << kind << " " << n;
      if (std::string(kind) == "exp_avg_sq")
        for (float v : a) moments += v;
    }
  EXPECT_GT(moments, 0.0);  // 10 steps of squared gradients
}

TEST(MegatronOptimizer, MainParametersAreTheWeightsOverTensorParallelism) {
  for (const std::string name :
       {"llama_dp2_torch_dist", "llama_tp2_dp2_torch_dist", "llama_tp2_dp2_torch"}) {
    const Loaded l(name);
    for (const std::string& n : l.model->names())
      EXPECT_EQ(l.state->read("param", n), l.model->read(n, l.model->shape(n))) << name << " " << n;
  }
  // tp 2 x dp 2 stores the same moments both ways.
  const Loaded dist("llama_tp2_dp2_torch_dist"), legacy("llama_tp2_dp2_torch");
  for (const std::string& n : dist.model->names())
    EXPECT_EQ(dist.state->read("exp_avg", n), legacy.state->read("exp_avg", n)) << n;
}

TEST(MegatronOptimizer, AWeightsOnlyCheckpointSaysSo) {
  const auto ck = mlm::open_checkpoint(mlm_test::fixture("llama_tp2_pp2_torch_dist").string(), {});
  const mlm::MlmTensors model(ck);
  const std::string e = mlm_test::refusal([&] { mlm::MlmOptimizerState s(ck, model); });
  EXPECT_NE(e.find("no optimizer state (saved with --no-save-optim?)"), std::string::npos) << e;
}

}  // namespace
