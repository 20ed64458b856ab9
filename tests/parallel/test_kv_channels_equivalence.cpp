// mpirun-np: 2 4
// A LLaMA-like tiny model whose head dimension (model.kv_channels 12) is not hidden / heads
// (32 / 4 = 8), so the query projection is 48 wide, not 32: tensor parallelism (with and without
// sequence parallelism, alone and with pipeline or data parallelism) splits the heads of the
// wider QKV and output projections and gives the single-process loss and gradient-norm curve, on
// the unfused and the flash attention paths.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

const std::vector<eq::Layout>& kv_layouts() {
  static const std::vector<eq::Layout> all = {
      {.tp = 2, .micro = 2},
      {.tp = 2, .micro = 2, .sp = true},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true},
      {.tp = 2, .dp = 2, .micro = 2, .distributed = true},
  };
  return all;
}

eq::RecipeSpec kv_model(const std::string& backend) {
  eq::RecipeSpec m{.arch = "llama", .layers = 2, .groups = 2, .ffn = 48};
  m.model_extra = "kv_channels: 12, attention_backend: " + backend;
  m.micro = 4;
  m.iters = 10;
  m.seed = 17;
  return m;
}

TEST(KvChannelsEquivalence, TensorParallelLayoutsMatchSingleProcess) {
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(kv_model("unfused"), src, kv_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("kv_channels unfused");
}

TEST(KvChannelsEquivalence, FlashAttentionLayoutsMatchSingleProcess) {
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(kv_model("flash"), src, kv_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("kv_channels flash");
}

}  // namespace
}  // namespace megatron
