// training.device: cuda with mixture-of-experts layers (megatron/transformer/moe): a tiny
// Mixtral-style model (LLaMA blocks, routed SwiGLU experts, aux and z losses; a second variant
// with sigmoid routing, a shared expert, expert bias and capacity drops with padding; GPT-OSS's
// blocks: learned attention sinks, biases, alternating windows, the clamped quick-GELU unit in
// biased experts behind a biased router) trains a
// few steps on the GPU and on the CPU from the same seed and data, as test_cuda_training.cpp:
// losses, gradient norms and the router statistics agree within a per-dtype tolerance. The CPU
// runs everywhere (they check the recipes and the device-generic MoE path the GPU shares); the
// GPU side is SKIPPED without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "megatron/training/mock_source.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

// LLaMA's blocks (the first cases); the model section's keys that replace them.
const char* const kLlamaBlock = ", activation: swiglu, add_bias: false";
const char* const kGptOssBlock =
    ", activation: quick_geglu, glu_linear_offset: 1.0, activation_func_clamp_value: 7.0,"
    " add_bias: true, add_qkv_bias: true, softmax_type: learnable, window_size: [7, 0],"
    " window_attn_skip_freq: 2";

struct Case {
  std::string name;
  std::string precision;  // fp32 | bf16
  std::string moe_keys;   // the model section's moe_* keys
  std::string block_keys = kLlamaBlock;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "/" << c.precision; }

constexpr int64_t kVocab = 96, kSeq = 16;

const char* const kTop2 =
    ", num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 88,"
    " moe_router_load_balancing_type: aux_loss, moe_aux_loss_coeff: 0.01, moe_z_loss_coeff: 0.001";
const char* const kCapacity =
    ", num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 64,"
    " moe_router_score_function: sigmoid, moe_router_enable_expert_bias: true,"
    " moe_shared_expert_intermediate_size: 48, moe_router_load_balancing_type: seq_aux_loss,"
    " moe_aux_loss_coeff: 0.01, moe_expert_capacity_factor: 1.0,"
    " moe_pad_expert_input_to_capacity: true";

config::Recipe moe_recipe(const Case& c, const std::string& device) {
  std::ostringstream y;
  y << "model: {arch: llama, num_layers: 2, hidden_size: 64, num_attention_heads: 4,"
    << " num_query_groups: 2, ffn_hidden_size: 176, seq_length: " << kSeq
    << ", vocab_size: " << kVocab << ", make_vocab_size_divisible_by: 32,"
    << " normalization: rmsnorm, position_embedding: rope, tie_embeddings: false" << c.block_keys
    << c.moe_keys << "}\n"
    << "training: {device: " << device << ", precision: " << c.precision
    << ", micro_batch_size: 2, global_batch_size: 4, train_iters: 4, eval_interval: 0,"
    << " eval_iters: 0, seed: 7, peak_tflops: 1.0}\n"
    << "optimizer: {lr: 0.003, min_lr: 0.0003, weight_decay: 0.1, clip_grad: 1.0,"
    << " schedule: {warmup_iters: 1}}\n"
    << "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: " << kVocab << "}}\n"
    << "logging: {interval: 100}\n";
  return config::parse_recipe_string(y.str(), c.name + "_" + device + ".yaml");
}

training::TrainSummary train(const Case& c, const std::string& device) {
  auto src = std::make_shared<training::MockTokenSource>(kSeq, kVocab, 11);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(moe_recipe(c, device), kVocab, src, nullptr, *world, log);
  return t.run();
}

class CudaMoeTraining : public testing::TestWithParam<Case> {};

TEST_P(CudaMoeTraining, LossesAndRouterStatisticsMatchTheCpuRun) {
  const Case c = GetParam();
  const auto cpu = train(c, "cpu");
  ASSERT_EQ(cpu.steps.size(), 4u);
  for (const auto& m : cpu.steps) {
    ASSERT_TRUE(std::isfinite(m.loss) && m.loss > 0.0);
    ASSERT_TRUE(m.has_moe);
    ASSERT_GT(m.moe_aux_loss, 0.0);
  }
  if (!device_available(Device::CUDA))
    GTEST_SKIP() << "no CUDA backend or no GPU here: the CPU run passed, the MoE model on "
                    "training.device: cuda did not run";
  const auto gpu = train(c, "cuda");
  // Routing is decided on the host from logits the GPU computed: a near-tie may flip a pick
  // between the devices, so the tolerances are those of the dense models' test (fp32 logits
  // agree far below any gap in these few steps).
  const double tol = c.precision == "fp32" ? 2e-4 : 2e-2;
  ASSERT_EQ(cpu.steps.size(), gpu.steps.size());
  for (size_t i = 0; i < cpu.steps.size(); ++i) {
    const auto &a = cpu.steps[i], &b = gpu.steps[i];
    EXPECT_NEAR(b.loss, a.loss, tol * a.loss) << "step " << i;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 5 * tol * a.grad_norm) << "step " << i;
    EXPECT_NEAR(b.moe_aux_loss, a.moe_aux_loss, 5 * tol * a.moe_aux_loss) << "step " << i;
    EXPECT_NEAR(b.moe_z_loss, a.moe_z_loss, 5 * tol * a.moe_z_loss + 1e-12) << "step " << i;
    EXPECT_NEAR(b.moe_dropped_fraction, a.moe_dropped_fraction, 0.05) << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaMoeTraining,
                         testing::Values(Case{"top2", "fp32", kTop2}, Case{"top2", "bf16", kTop2},
                                         Case{"capacity", "fp32", kCapacity},
                                         Case{"capacity", "bf16", kCapacity},
                                         Case{"gpt_oss", "fp32", kTop2, kGptOssBlock},
                                         Case{"gpt_oss", "bf16", kTop2, kGptOssBlock}),
                         [](const testing::TestParamInfo<Case>& info) {
                           return info.param.name + "_" + info.param.precision;
                         });

}  // namespace
}  // namespace megatron
