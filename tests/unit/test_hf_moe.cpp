// The MoE decoder families (models/gpt/hf_moe.cpp): Qwen2-MoE's and Qwen3-MoE's routing and
// layer keys read as the model's, the config.json files of released checkpoints
// (tests/fixtures/hf_configs) are the full-size recipes' models, which the planner counts as
// transformers does, and a model whose experts or routing an architecture cannot describe never
// exports under it. (Logits, greedy generation, round trips and layouts: test_hf_logits.cpp and
// test_hf_conversion.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "megatron/hf/fp8_blocks.h"
#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_decoder.h"
#include "models/gpt/hf_deepseek.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class HfMoe : public HfScratch {};

std::vector<int64_t> routed_layers(const config::ModelConfig& m) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < m.num_layers; ++l) out.push_back(m.moe.moe_layer_freq.is_moe(l));
  return out;
}

TEST_F(HfMoe, QwenRoutingAndLayerKeysAreTheModels) {
  const auto q2 = model_of(fixture("qwen2_moe") / "config.json");
  EXPECT_TRUE(q2.moe.moe_router_pre_softmax);  // norm_topk_prob false
  EXPECT_EQ(q2.moe.moe_shared_expert_intermediate_size, 40);
  EXPECT_TRUE(q2.moe.moe_shared_expert_gate);
  EXPECT_TRUE(q2.add_qkv_bias);
  EXPECT_EQ(q2.ffn(), 48);
  EXPECT_EQ(q2.moe.expert_ffn(q2.ffn()), 24);
  EXPECT_EQ(routed_layers(q2), (std::vector<int64_t>{1, 0, 1}));  // mlp_only_layers [1]
  const auto q3 = model_of(fixture("qwen3_moe") / "config.json");
  EXPECT_FALSE(q3.moe.moe_router_pre_softmax);  // norm_topk_prob true
  EXPECT_EQ(q3.moe.num_experts, 8);             // transformers 5's num_local_experts
  EXPECT_TRUE(q3.qk_layernorm);
  EXPECT_EQ(q3.moe.moe_shared_expert_intermediate_size, 0);
  EXPECT_EQ(routed_layers(q3), (std::vector<int64_t>{0, 1, 0, 1}));  // decoder_sparse_step 2
  EXPECT_EQ(models::decoder_architecture_for(q2), "Qwen2MoeForCausalLM");
  EXPECT_EQ(models::decoder_architecture_for(q3), "Qwen3MoeForCausalLM");
}

// Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: transformers 5.24 builds 30,532,122,624 and
// 235,093,634,560 parameters from their config.json (Qwen3MoeForCausalLM on the meta device);
// the planner counts the same (their vocabulary needs no padding at tp 1), and the recipes'
// layouts fit their clusters.
TEST_F(HfMoe, Qwen3MoeConfigsAreTheRecipeModels) {
  for (const auto& [name, params] : {std::pair<std::string, int64_t>{"qwen3_30b_a3b", 30532122624},
                                     {"qwen3_235b_a22b", 235093634560}}) {
    SCOPED_TRACE(name);
    const auto hf = model_of(released(name));
    EXPECT_EQ(hf.moe.num_experts, 128);
    EXPECT_EQ(hf.moe.moe_router_topk, 8);
    EXPECT_FALSE(hf.moe.moe_router_pre_softmax);
    const config::Recipe r = recipe(name + ".yaml");
    EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released(name).string()));
    const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
    EXPECT_EQ(r.model.padded_vocab_size(r.model.vocab_size, r.parallel.tensor), 151936);
    EXPECT_EQ(report.params.total, params);
    EXPECT_TRUE(report.fits);
  }
}

// Qwen/Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): 60 experts of 1408, top-4 unnormalized, a gated
// shared expert of 5632, q/k/v biases, no window (use_sliding_window false); transformers 5.24
// builds 14,315,784,192 parameters, the planner the same.
TEST_F(HfMoe, Qwen15MoeConfigIsSizedAsTransformersCountsIt) {
  const auto hf = model_of(released("qwen1.5_moe_a2.7b"));
  EXPECT_EQ(hf.moe.num_experts, 60);
  EXPECT_TRUE(hf.moe.moe_router_pre_softmax);
  EXPECT_TRUE(hf.moe.moe_shared_expert_gate);
  EXPECT_EQ(hf.attention_window(), 0);
  config::Recipe r = recipe("qwen3_30b_a3b.yaml");
  r.model = hf;
  r.model.seq_length = 4096;
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), hf.vocab_size);
  EXPECT_EQ(report.params.total, 14315784192);
}

TEST_F(HfMoe, ExpertsExportOnlyWhereTheArchitectureDescribesThem) {
  config::ModelConfig m = model_of(fixture("qwen3_moe") / "config.json");
  EXPECT_THAT([&] { models::hf_mappings("Qwen3ForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("Qwen3ForCausalLM has no experts")));
  EXPECT_THAT([&] { models::hf_mappings("MixtralForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("converts as Qwen3MoeForCausalLM")));
  config::ModelConfig sigmoid = m;
  sigmoid.moe.moe_router_score_function = config::MoeScoreFunction::Sigmoid;
  EXPECT_THAT([&] { models::hf_mappings("Qwen3MoeForCausalLM", sigmoid, 96); },
              ThrowsMessage<InputError>(HasSubstr("moe_router_score_function sigmoid")));
  config::ModelConfig shared = m;
  shared.moe.moe_shared_expert_intermediate_size = 16;
  EXPECT_THAT([&] { models::hf_mappings("Qwen3MoeForCausalLM", shared, 96); },
              ThrowsMessage<InputError>(HasSubstr("has no shared expert")));
  config::ModelConfig q2 = model_of(fixture("qwen2_moe") / "config.json");
  q2.moe.moe_shared_expert_gate = false;
  EXPECT_EQ(models::decoder_architecture_for(q2), "MixtralForCausalLM");
  EXPECT_THAT([&] { models::hf_mappings("Qwen2MoeForCausalLM", q2, 96); },
              ThrowsMessage<InputError>(HasSubstr("moe_shared_expert_gate: true")));
  EXPECT_THAT([&] { models::hf_mappings("MixtralForCausalLM", q2, 96); },
              ThrowsMessage<InputError>(HasSubstr("MixtralForCausalLM has no q/k/v biases")));
}

// deepseek-ai/DeepSeek-V3: transformers 5.24 builds 671,026,404,352 parameters from its
// config.json (without the multi-token-prediction layer); recipes/deepseek_v3.yaml is that model,
// the planner counts the same and the recipe's layout fits.
TEST_F(HfMoe, DeepseekV3ConfigIsTheRecipeModel) {
  const auto hf = model_of(released("deepseek_v3"));
  EXPECT_TRUE(hf.mla.enabled());
  EXPECT_EQ(hf.mla.q_lora_rank, 1536);
  EXPECT_EQ(hf.head_dim(), 192);
  EXPECT_EQ(hf.rotary_dims(), 64);
  EXPECT_EQ(hf.position_embedding, config::PositionEmbedding::Yarn);
  EXPECT_EQ(hf.moe.moe_router_num_groups, 8);
  EXPECT_EQ(hf.moe.moe_router_group_topk, 4);
  EXPECT_EQ(hf.moe.moe_shared_expert_intermediate_size, 2048);
  EXPECT_EQ(routed_layers(hf)[2], 0);
  EXPECT_EQ(routed_layers(hf)[3], 1);
  const config::Recipe r = recipe("deepseek_v3.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released("deepseek_v3").string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 671026404352);
  EXPECT_TRUE(report.fits);
  // Its FP8 weights come in 128 x 128 blocks, which the import dequantizes as it streams.
  const hf::Fp8Blocks blocks =
      hf::fp8_blocks_of(hf::ConfigJson::load(released("deepseek_v3").string()));
  EXPECT_EQ(blocks.rows, 128);
  EXPECT_EQ(blocks.cols, 128);
}

TEST_F(HfMoe, DeepseekV3KeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("deepseek_v3", edit);
  };
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["num_key_value_heads"] = 2; }),
              HasSubstr("\"num_key_value_heads\": 2 differs from num_attention_heads 4"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["qk_head_dim"] = 16; }),
              HasSubstr("\"qk_head_dim\": 16 is not qk_nope_head_dim + qk_rope_head_dim (12)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["topk_group"] = 1; }),
              HasSubstr("\"topk_group\": 1 with num_experts_per_tok 4"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["scoring_func"] = "softmax"; }),
              HasSubstr("\"scoring_func\": only sigmoid"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["norm_topk_prob"] = false; }),
              HasSubstr("\"norm_topk_prob\": only renormalized"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["first_k_dense_replace"] = 3; }),
              HasSubstr("\"first_k_dense_replace\": must be in [0, num_hidden_layers)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["attention_bias"] = true; }),
              HasSubstr("\"attention_bias\": true is not implemented"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["v_head_dim"] = 16; }),
              HasSubstr("model.v_head_dim: must be <= qk_head_dim + qk_pos_emb_head_dim"));
  // The expert bias is a tensor of the checkpoint: missing, it is named.
  const fs::path d = editable("deepseek_v3");
  rewrite(d, [](RawTensors& t) { t.erase("model.layers.1.mlp.gate.e_score_correction_bias"); });
  EXPECT_THAT(
      [&] { import(d, "out"); },
      ThrowsMessage<InputError>(HasSubstr("model.layers.1.mlp.gate.e_score_correction_bias")));
}

// FP8 block-quantized weights (deepseek_v3_fp8): the scales are named when missing or mis-shaped,
// other quantization methods and FP8 without a quantization_config are refused; the export
// writes the dequantized weights and no quantization_config.
TEST_F(HfMoe, Fp8BlockWeightsImportDequantizedAndBadScalesAreNamed) {
  import(fixture("deepseek_v3_fp8"), "fp8");
  export_to("fp8", "fp8_hf");
  const auto config = nlohmann::json::parse(std::ifstream(dir_ / "fp8_hf" / "config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));
  const RawTensors out = raw_tensors(dir_ / "fp8_hf");
  EXPECT_EQ(std::get<0>(out.at("model.layers.1.self_attn.kv_b_proj.weight")), "F32");
  EXPECT_FALSE(out.count("model.layers.1.self_attn.kv_b_proj.weight_scale_inv"));
  const std::string w = "model.layers.1.self_attn.kv_b_proj.weight", scale = w + "_scale_inv";
  auto error_of = [&](const fs::path& d) -> std::string {
    try {
      import(d, "bad");
    } catch (const InputError& e) {
      return e.what();
    }
    return "imported";
  };
  const fs::path missing = editable("deepseek_v3_fp8");
  rewrite(missing, [&](RawTensors& t) { t.erase(scale); });
  EXPECT_THAT(error_of(missing), HasSubstr("FP8 tensor '" + w + "' has no '" + scale + "'"));
  const fs::path shaped = editable("deepseek_v3_fp8");
  rewrite(shaped, [&](RawTensors& t) { std::get<1>(t[scale]) = {2, 2}; });
  EXPECT_THAT(error_of(shaped), HasSubstr("the weight_block_size [16, 16] of [56,8] needs [4,1]"));
  const fs::path method = editable("deepseek_v3_fp8");
  edit_config(method, [](nlohmann::json& j) { j["quantization_config"]["quant_method"] = "awq"; });
  EXPECT_THAT(error_of(method), HasSubstr("\"quantization_config\": quant_method 'awq'"));
  const fs::path unscaled = editable("deepseek_v3_fp8");
  edit_config(unscaled, [](nlohmann::json& j) { j.erase("quantization_config"); });
  EXPECT_THAT(error_of(unscaled),
              HasSubstr("has dtype F8_E4M3 (F32, BF16 or F16 convert; F8_E4M3"));
}

// DeepSeek-V3 as released carries its multi-token-prediction layer as model.layers.61.*: the
// import leaves it out (as transformers does) and says so; other extra tensors stay errors.
TEST_F(HfMoe, DeepseekV3MtpLayerIsLeftOutAndSaid) {
  const fs::path d = editable("deepseek_v3");
  rewrite(d, [](RawTensors& t) {
    t["model.layers.3.enorm.weight"] = t.at("model.norm.weight");
    t["model.layers.3.eh_proj.weight"] = t.at("model.layers.0.self_attn.o_proj.weight");
  });
  models::HfImportOptions o;
  o.hf_dir = d.string();
  o.out_dir = (dir_ / "mtp").string();
  const models::HfImportResult r = models::import_hf_checkpoint(o);
  ASSERT_EQ(r.left_out.size(), 1u);
  EXPECT_THAT(r.left_out[0], HasSubstr("multi-token-prediction layer model.layers.3.*"));
  const fs::path extra = editable("deepseek_v3");
  rewrite(extra,
          [](RawTensors& t) { t["model.layers.4.enorm.weight"] = t.at("model.norm.weight"); });
  EXPECT_THAT([&] { import(extra, "extra"); },
              ThrowsMessage<InputError>(HasSubstr("'model.layers.4.enorm.weight' is not part")));
}

// A native MLA model exports only as DeepseekV3ForCausalLM, with DeepSeek's routing.
TEST_F(HfMoe, MlaExportsOnlyAsDeepseekV3) {
  const config::ModelConfig m = model_of(fixture("deepseek_v3") / "config.json");
  EXPECT_THAT([&] { models::hf_mappings("Qwen3MoeForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("has no multi-latent attention")));
  config::ModelConfig softmax = m;
  softmax.moe.moe_router_score_function = config::MoeScoreFunction::Softmax;
  EXPECT_THAT([&] { models::hf_mappings(models::kDeepseekV3, softmax, 96); },
              ThrowsMessage<InputError>(HasSubstr("routes by sigmoid scores")));
  config::ModelConfig late_dense = m;
  late_dense.moe.moe_layer_freq = {1, {0, 1, 0}};
  EXPECT_THAT([&] { models::hf_mappings(models::kDeepseekV3, late_dense, 96); },
              ThrowsMessage<InputError>(HasSubstr("dense layer 2 after a routed one")));
  config::ModelConfig scaled = m;
  scaled.softmax_scale = 0.5;
  EXPECT_THAT(
      [&] { models::hf_mappings(models::kDeepseekV3, scaled, 96); },
      ThrowsMessage<InputError>(HasSubstr("DeepseekV3ForCausalLM has no model.softmax_scale")));
}

}  // namespace
}  // namespace megatron
