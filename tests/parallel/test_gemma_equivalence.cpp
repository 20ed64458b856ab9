// mpirun-np: 2 4
// Gemma-like tiny models: 1 + w RMSNorms in a sandwich around both sub-layers, scaled
// embeddings, a GELU-tanh gated MLP, a softmax scale, tied embeddings, sliding and full layers;
// Gemma 2 with soft-capped attention scores (the flash kernels, and under context parallelism
// their blocks) and logits, Gemma 3 with per-head 1 + w q/k norms and a local rope base on the
// sliding layers. Every model layout (tp + sp, pp 1F1B and interleaved, dp with the distributed
// optimizer and ZeRO-3), recompute, LoRA and context parallelism must give the single-process
// loss and gradient-norm curve.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

// (arch gpt: the fixture's llama preset would set SwiGLU and an untied head. init std 0.1: at
// 0.02 the output norms magnify the layouts' fp32 summation orders, as in the OLMo-2 test.)
constexpr const char* kGemma =
    "normalization: rmsnorm, position_embedding: rope, add_bias: false, "
    "activation: geglu, layernorm_zero_centered_gamma: true, sublayer_output_norm: true, "
    "scale_embeddings_by_sqrt_hidden: true, softmax_scale: 0.3, tie_embeddings: true, "
    "window_size: [5, 0], window_attn_skip_freq: 2, init_method_std: 0.1, ";

eq::RecipeSpec gemma2() {
  eq::RecipeSpec m{.arch = "gpt", .layers = 4, .hidden = 32, .heads = 4, .groups = 2, .ffn = 48};
  m.model_extra = std::string(kGemma) + "attn_logit_softcapping: 2.0, final_logit_softcapping: 3.0";
  m.dropout = 0.1;
  m.micro = 4;
  m.iters = 10;
  m.seed = 41;
  m.lr = 0.01;
  return m;
}

eq::RecipeSpec gemma3() {
  eq::RecipeSpec m = gemma2();
  m.model_extra = std::string(kGemma) + "qk_layernorm: true, rope_local_base_freq: 100";
  m.seed = 43;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(GemmaEquivalence, ModelLayoutsMatchSingleProcess) {
  for (const eq::RecipeSpec& m : {gemma2(), gemma3()})
    EXPECT_GT(eq::expect_layouts_match(m, tokens(), eq::model_layouts()), 0)
        << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("gemma layouts");
}

TEST(GemmaEquivalence, RecomputeShardingAndLora) {
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.pp = 2, .micro = 2, .recompute = "full"},
      {.dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.tp = 2, .dp = 2, .micro = 2, .sp = true, .sharding = "optim_grads_params"},
  };
  for (const eq::RecipeSpec& m : {gemma2(), gemma3()})
    EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts), 0)
        << "no layout for " << mp::testing::world().size() << " ranks";
  eq::RecipeSpec lora = gemma2();
  lora.extra_sections = "peft: {type: lora, dim: 4, alpha: 8}\n";
  EXPECT_GT(eq::expect_layouts_match(lora, tokens(), eq::family_lora_layouts()), 0);
  eq::report_max_diff("gemma recompute, sharding, lora");
}

TEST(GemmaEquivalence, ContextParallelLayoutsMatchSingleProcess) {
  for (eq::RecipeSpec m : {gemma2(), gemma3()}) {
    m.heads = 8;  // 4 groups: a2a splits them over tp x cp = 4 ranks
    m.groups = 4;
    m.dropout = 0;
    m.seq = 32;
    EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
        << "no layout for " << mp::testing::world().size() << " ranks";
  }
  eq::report_max_diff("gemma context parallel");
}

}  // namespace
}  // namespace megatron
