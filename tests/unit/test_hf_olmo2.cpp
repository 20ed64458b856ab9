// OLMo-2 (models/gpt/hf_olmo2.cpp): allenai/OLMo-2-1124-7B's config.json describes exactly
// recipes/olmo2_7b.yaml's model, whose parameters the planner counts as transformers does;
// config keys the converter cannot represent and mis-shaped norm tensors are errors naming the
// file and key; an OLMo-2 model never exports under an architecture that would drop its output
// norms or misread its q/k norms, nor does another model export as OLMo-2.
// (Logits and greedy tokens against transformers: test_hf_logits.cpp; round trips and layouts:
// test_hf_conversion.cpp; training layouts: test_olmo2_equivalence.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_decoder.h"
#include "models/gpt/hf_neox.h"
#include "models/gpt/hf_olmo2.h"
#include "models/hf_models.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;

class HfOlmo2 : public HfScratch {};

// allenai/OLMo-2-1124-7B: transformers builds 7,298,617,344 parameters from its config.json
// (Olmo2ForCausalLM on the meta device, torch 2.9.1 and transformers 5.24.0), and so does the
// planner (100352 rows need no padding).
TEST_F(HfOlmo2, Olmo2_7bConfigIsTheRecipeModel) {
  const fs::path config = released("olmo2_7b");
  const auto hf = models::model_from_hf_config(hf::ConfigJson::load(config.string()));
  EXPECT_TRUE(hf.qk_layernorm);
  EXPECT_EQ(hf.qk_layernorm_span, config::QkNormSpan::Projection);
  EXPECT_FALSE(hf.sublayer_input_norm);
  EXPECT_TRUE(hf.sublayer_output_norm);
  EXPECT_EQ(hf.rope_theta, 500000.0);
  const config::Recipe r = recipe("olmo2_7b.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, config.string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 7298617344);
  EXPECT_TRUE(report.fits);
  EXPECT_EQ(models::hf_architecture_for(r), models::kOlmo2);
  EXPECT_EQ(models::hf_architecture_for(recipe("olmo2_tiny.yaml")), models::kOlmo2);
}

TEST_F(HfOlmo2, ConfigKeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("olmo2", edit);
  };
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["attention_bias"] = true; }),
              HasSubstr("\"attention_bias\": true (biases on q/k/v/o but not on the MLP)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["hidden_act"] = "gelu"; }),
              HasSubstr("\"hidden_act\": 'gelu' (only silu: SwiGLU)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["clip_qkv"] = 8.0; }),
              HasSubstr("\"clip_qkv\": is not a key the Olmo2ForCausalLM converter"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["head_dim"] = 0; }),
              HasSubstr("\"head_dim\": must be > 0 (got 0)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["rope_parameters"]["rope_type"] = "default";
                j["rope_parameters"]["partial_rotary_factor"] = 0.5;
              }),
              HasSubstr("turns whole heads"));
}

// q_norm spans the whole query projection ([heads x head_dim]), k_norm the key one
// ([kv heads x head_dim]): a per-head-sized tensor is refused by name.
TEST_F(HfOlmo2, NormTensorsAreCheckedByShape) {
  const fs::path d = editable("olmo2");
  rewrite(d, [](RawTensors& t) { std::get<1>(t["model.layers.1.self_attn.k_norm.weight"]) = {8}; });
  try {
    import(d, "out");
    ADD_FAILURE() << "imported a per-head-sized k_norm";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'model.layers.1.self_attn.k_norm.weight' has shape [8]"));
  }
  const fs::path missing = editable("olmo2");
  rewrite(missing,
          [](RawTensors& t) { t.erase("model.layers.0.post_feedforward_layernorm.weight"); });
  EXPECT_THROW(import(missing, "out2"), InputError);
}

TEST_F(HfOlmo2, ExportsOnlyAsOlmo2) {
  config::ModelConfig m = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("olmo2") / "config.json").string()));
  for (const char* other : {"LlamaForCausalLM", "Qwen3ForCausalLM"})
    EXPECT_THAT([&] { models::hf_mappings(other, m, 96); },
                ThrowsMessage<InputError>(HasSubstr("converts as Olmo2ForCausalLM")));
  EXPECT_THAT([&] { models::hf_mappings(models::kGptNeoX, m, 96); },
              ThrowsMessage<InputError>(HasSubstr("this model is not one")));
  // Per-head q/k norms, or input norms too (Gemma's sandwich), are not OLMo-2's.
  m.qk_layernorm_span = config::QkNormSpan::Head;
  EXPECT_THAT([&] { models::hf_mappings(models::kOlmo2, m, 96); },
              ThrowsMessage<InputError>(HasSubstr("this model is not one")));
  m.qk_layernorm_span = config::QkNormSpan::Projection;
  m.sublayer_input_norm = true;
  config::Recipe sandwich;
  sandwich.model = m;
  EXPECT_NE(models::hf_architecture_for(sandwich), models::kOlmo2);
  EXPECT_THAT([&] { models::hf_mappings(models::kOlmo2, m, 96); },
              ThrowsMessage<InputError>(HasSubstr("this model is not one")));
}

}  // namespace
}  // namespace megatron
