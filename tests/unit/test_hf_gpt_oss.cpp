// GPT-OSS (models/gpt/hf_gpt_oss.cpp, megatron/hf/fused_experts.h): config.json read as the
// model (sinks, biases, windows by layer_types, the clamped quick-GELU experts, YaRN); the fused
// experts read expert by expert, dense or MXFP4; the MXFP4 fixture exports dense with the
// dequantized values and no quantization_config; bad MXFP4 parts and keys it cannot represent
// are named. (Logits and greedy tokens against transformers at tp 1 and 2:
// test_hf_logits.cpp; the dense fixture's bit-identical round trip: test_hf_conversion.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_gpt_oss.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;

class HfGptOss : public HfScratch {
 protected:
  std::string import_error(const fs::path& d) {
    try {
      import(d, concat("bad_", ++bad_));
    } catch (const InputError& e) {
      return e.what();
    }
    return "imported";
  }
  int bad_ = 0;
};

TEST_F(HfGptOss, ConfigIsTheRecipeModel) {
  const config::ModelConfig m = model_of(fixture("gpt_oss") / "config.json");
  EXPECT_EQ(m.softmax_type, config::SoftmaxType::Learnable);
  EXPECT_EQ(m.activation, config::Activation::QuickGeGLU);
  EXPECT_EQ(m.glu_linear_offset, 1.0);
  EXPECT_EQ(m.activation_func_clamp_value, 7.0);
  EXPECT_TRUE(m.add_bias && m.add_qkv_bias);
  EXPECT_EQ(m.moe.num_experts, 4);
  EXPECT_EQ(m.moe.moe_router_topk, 2);
  EXPECT_FALSE(m.moe.moe_router_pre_softmax);  // softmax over the picked logits
  EXPECT_EQ(m.head_dim(), 16);
  // layer_types sliding, full, sliding; sliding_window 5.
  EXPECT_EQ(m.layer_window(0), 5);
  EXPECT_EQ(m.layer_window(1), 0);
  EXPECT_EQ(m.layer_window(2), 5);
  EXPECT_EQ(models::hf_architecture_for([&] {
              config::Recipe r;
              r.model = m;
              return r;
            }()),
            models::kGptOss);
}

// openai/gpt-oss-20b and -120b (tests/fixtures/hf_configs): read as the model, sized by the
// planner as transformers 5.24 builds them (20,914,757,184 and 116,829,156,672 parameters, the
// model cards' 20.91B and 116.83B); recipes/gpt_oss_120b.yaml is the 120b's model and fits its
// cluster.
TEST_F(HfGptOss, ReleasedConfigsAreSizedAsTransformersCountsThem) {
  for (const auto& [name, params] : {std::pair<std::string, int64_t>{"gpt_oss_20b", 20914757184},
                                     {"gpt_oss_120b", 116829156672}}) {
    SCOPED_TRACE(name);
    const config::ModelConfig hf = model_of(released(name));
    EXPECT_EQ(hf.attention_window(), 128);
    EXPECT_EQ(hf.layer_window(1), 0);
    EXPECT_EQ(hf.position_embedding, config::PositionEmbedding::Yarn);
    EXPECT_EQ(hf.moe.moe_router_topk, 4);
    config::Recipe r = recipe("gpt_oss_120b.yaml");
    if (name == "gpt_oss_120b") {
      EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released(name).string()));
    } else {
      r.model = hf;
      r.model.seq_length = 4096;
      r.model.make_vocab_size_divisible_by = 64;
    }
    const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
    EXPECT_EQ(r.model.padded_vocab_size(r.model.vocab_size, r.parallel.tensor), 201088);
    EXPECT_EQ(report.params.total, params);
    if (name == "gpt_oss_120b") {
      EXPECT_TRUE(report.fits);
    }
  }
  // A recipe whose sinks or unit differ from the checkpoint's is named.
  config::Recipe r = recipe("gpt_oss_120b.yaml");
  r.model.glu_linear_offset = 0;
  EXPECT_THAT([&] { models::check_recipe_matches(r, model_of(released("gpt_oss_120b")), "c"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("model.glu_linear_offset is 0")));
}

TEST_F(HfGptOss, KeysItCannotRepresentAreNamed) {
  EXPECT_THAT(edited_config_error("gpt_oss", [](auto& j) { j["swiglu_alpha"] = 1.5; }),
              HasSubstr("\"swiglu_alpha\": 1.5: the quick GELU here uses 1.702"));
  EXPECT_THAT(edited_config_error("gpt_oss", [](auto& j) { j["attention_bias"] = false; }),
              HasSubstr("\"attention_bias\": false"));
  EXPECT_THAT(
      edited_config_error("gpt_oss", [](auto& j) { j["layer_types"][1] = "chunked_attention"; }),
      HasSubstr("(full_attention or sliding_attention)"));
  EXPECT_THAT(
      edited_config_error("gpt_oss_mxfp4",
                          [](auto& j) { j["quantization_config"]["quant_method"] = "fp8"; }),
      HasSubstr("quant_method fp8: GptOssForCausalLM converts dense or MXFP4"));
}

// The released form: each expert's MXFP4 slab dequantized as transformers does; exported dense
// (F32), the export re-imports to the same weights, and holds no quantization_config.
TEST_F(HfGptOss, Mxfp4ExpertsExportDenseWithTheDequantizedValues) {
  import(fixture("gpt_oss_mxfp4"), "q");
  export_to("q", "q_hf");
  const auto config = nlohmann::json::parse(std::ifstream(dir_ / "q_hf" / "config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));
  const RawTensors out = raw_tensors(dir_ / "q_hf");
  const std::string w = "model.layers.0.mlp.experts.gate_up_proj";
  ASSERT_TRUE(out.count(w));
  EXPECT_EQ(std::get<1>(out.at(w)), (std::vector<int64_t>{4, 64, 128}));
  EXPECT_FALSE(out.count(w + "_blocks") || out.count(w + "_scales"));
  import(dir_ / "q_hf", "q_again");
  EXPECT_EQ(native_tensors(dir_ / "q_again"), native_tensors(dir_ / "q"));
}

TEST_F(HfGptOss, BadMxfp4PartsAreNamed) {
  const std::string w = "model.layers.1.mlp.experts.down_proj";
  const fs::path missing = editable("gpt_oss_mxfp4");
  rewrite(missing, [&](RawTensors& t) { t.erase(w + "_scales"); });
  EXPECT_THAT(import_error(missing),
              HasSubstr("MXFP4 blocks '" + w + "_blocks' without their scales '" + w + "_scales'"));
  const fs::path shaped = editable("gpt_oss_mxfp4");
  rewrite(shaped, [&](RawTensors& t) { std::get<1>(t[w + "_scales"]) = {4, 64, 1, 2}; });
  EXPECT_THAT(import_error(shaped), HasSubstr("MXFP4 parts that do not fit it"));
  const fs::path typed = editable("gpt_oss_mxfp4");
  rewrite(typed, [&](RawTensors& t) { std::get<0>(t[w + "_blocks"]) = "I8"; });
  EXPECT_THAT(import_error(typed),
              HasSubstr("an MXFP4 part '" + w + "_blocks' of dtype I8 (blocks and scales are U8)"));
  // A dense fused tensor of the wrong shape: its file and shape named.
  const fs::path dense = editable("gpt_oss");
  const std::string b = "model.layers.0.mlp.experts.down_proj_bias";
  rewrite(dense, [&](RawTensors& t) { std::get<1>(t[b]) = {2, 128}; });
  EXPECT_THAT(import_error(dense), HasSubstr("has shape [2,128]"));
}

}  // namespace
}  // namespace megatron
