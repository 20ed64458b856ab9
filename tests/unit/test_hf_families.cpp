// The model families beyond LLaMA/Mistral/Qwen2 (models/gpt/hf_decoder.cpp): each family's HF
// config keys it cannot represent are errors naming the file and key; a family's model never
// exports under an architecture that would drop part of it; the config.json of a released
// checkpoint (tests/fixtures/hf_configs) describes exactly the model of the matching full-size
// recipe, whose parameters the planner counts as transformers does. (Logits, greedy generation,
// round trips and layouts of each family: test_hf_logits.cpp, test_hf_conversion.cpp and the
// family's equivalence test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_decoder.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;

class HfFamilies : public HfScratch {};

// Qwen/Qwen3-8B's config.json is recipes/qwen3_8b.yaml's model; transformers builds
// 8,190,735,360 parameters from it (Qwen3ForCausalLM on the meta device, torch 2.9.1 and
// transformers 5.24.0); the planner counts those plus the vocabulary padding to 152064 rows of
// the embedding and the output layer.
TEST_F(HfFamilies, Qwen3_8bConfigIsTheRecipeModel) {
  const auto hf = models::model_from_hf_config(hf::ConfigJson::load(released("qwen3_8b").string()));
  EXPECT_TRUE(hf.qk_layernorm);
  EXPECT_EQ(hf.head_dim(), 128);
  const config::Recipe r = recipe("qwen3_8b.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released("qwen3_8b").string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 8190735360 + 2 * (152064 - 151936) * 4096);
  EXPECT_TRUE(report.fits);
}

TEST_F(HfFamilies, Qwen3ConfigKeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("qwen3", edit);
  };
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["attention_bias"] = true; }),
              HasSubstr("_qwen3_1/config.json: \"attention_bias\": true (biases on q/k/v/o but"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["layer_types"] = {"sliding_attention", "full_attention"};
              }),
              HasSubstr("\"layer_types\": has sliding_attention layers without "
                        "use_sliding_window: true"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["layer_types"] = {"chunked_attention", "full_attention"};
              }),
              HasSubstr("\"layer_types\": has \"chunked_attention\""));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }),
              HasSubstr("\"layer_types\": must list num_hidden_layers (2) entries"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["qk_norm_type"] = "whole"; }),
              HasSubstr("\"qk_norm_type\": is not a key"));
}

TEST_F(HfFamilies, Qwen3NormTensorsAreCheckedByShape) {
  const fs::path d = editable("qwen3");
  rewrite(d, [](RawTensors& t) {
    std::get<1>(t["model.layers.1.self_attn.k_norm.weight"]) = {8, 2};
  });
  try {
    import(d, "out");
    ADD_FAILURE() << "imported a mis-shaped k_norm";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'model.layers.1.self_attn.k_norm.weight' has shape [8,2]"));
  }
  const fs::path missing = editable("qwen3");
  rewrite(missing, [](RawTensors& t) { t.erase("model.layers.0.self_attn.q_norm.weight"); });
  EXPECT_THROW(import(missing, "out2"), InputError);
}

// A qk_layernorm model has no LLaMA export (the norms would be dropped), and Qwen3 has no
// q/k/v-only biases.
TEST_F(HfFamilies, Qwen3ExportsOnlyAsQwen3) {
  config::ModelConfig m = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("qwen3") / "config.json").string()));
  EXPECT_EQ(models::decoder_architecture_for(m), "Qwen3ForCausalLM");
  EXPECT_THAT([&] { models::hf_mappings("LlamaForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("converts as Qwen3ForCausalLM")));
  m.add_qkv_bias = true;
  EXPECT_THAT([&] { models::hf_mappings("Qwen3ForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("has no q/k/v-only biases")));
  m.add_qkv_bias = false;
  m.qk_layernorm = false;
  EXPECT_THAT([&] { models::hf_mappings("Qwen3ForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("needs model.qk_layernorm: true")));
}

// Partial rotary embeddings (Phi-4-mini's partial_rotary_factor: model.rotary_percent) convert as
// Phi-3 only: transformers turns whole heads in the other LLaMA-family models.
TEST_F(HfFamilies, PartialRotaryConvertsAsPhi3Only) {
  config::ModelConfig m = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("phi3_partial_longrope") / "config.json").string()));
  EXPECT_DOUBLE_EQ(m.rotary_percent, 0.75);
  EXPECT_EQ(m.rotary_dims(), 6);
  EXPECT_EQ(models::decoder_architecture_for(m), "Phi3ForCausalLM");
  EXPECT_THAT([&] { models::hf_mappings("LlamaForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("converts as Phi3ForCausalLM")));
  EXPECT_THAT(edited_config_error(
                  "llama_bf16",
                  [](nlohmann::json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; }),
              HasSubstr("partial rotary embeddings convert as Phi3ForCausalLM only"));
}

// Per-layer windows (model.window_attn_skip_freq, 1 = window): from layer_types, else Qwen's
// max_window_layers or SmolLM3's NoPE layers; they export only where per-layer windows exist.
TEST_F(HfFamilies, PerLayerWindowsFromLayerTypesOrTheFamilyRule) {
  config::ModelConfig q = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("qwen2_window_layers") / "config.json").string()));
  EXPECT_EQ(q.attention_window(), 5);
  EXPECT_EQ(q.window_attn_skip_freq.pattern, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(models::decoder_architecture_for(q), "Qwen2ForCausalLM");
  EXPECT_THAT([&] { models::hf_mappings("MistralForCausalLM", q, 96); },
              ThrowsMessage<InputError>(HasSubstr("has one sliding window for every layer")));
  const fs::path d = editable("qwen2_window_layers");
  edit_config(d, [](nlohmann::json& j) {
    j.erase("layer_types");
    j["max_window_layers"] = 2;
  });
  const auto derived =
      models::model_from_hf_config(hf::ConfigJson::load((d / "config.json").string()));
  EXPECT_EQ(derived.window_attn_skip_freq.pattern, (std::vector<int64_t>{0, 0, 1}));
  const auto s = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("smollm3_sliding") / "config.json").string()));
  EXPECT_EQ(s.window_attn_skip_freq.pattern, (std::vector<int64_t>{0, 1, 0, 1}));
  const auto j = models::decoder_hf_config(s, "SmolLM3ForCausalLM", "F32", nullptr);
  EXPECT_EQ(j["layer_types"], nlohmann::json({"full_attention", "sliding_attention",
                                              "full_attention", "sliding_attention"}));
  EXPECT_EQ(j["use_sliding_window"], true);
  EXPECT_EQ(j["sliding_window"], 5);
}

// transformers' SmolLM3Config defaults (the architecture of HuggingFaceTB/SmolLM3-3B; a released
// config.json may set another context length or rope base) are recipes/smollm3_3b.yaml's model:
// every fourth layer without rope; transformers builds 3,075,098,624 parameters from them
// (SmolLM3ForCausalLM on the meta device, torch 2.9.1, transformers 5.24.0), and so does the
// planner (tied embeddings; 128256 needs no padding at tp 1).
TEST_F(HfFamilies, SmolLM3_3bConfigIsTheRecipeModel) {
  const auto hf =
      models::model_from_hf_config(hf::ConfigJson::load(released("smollm3_3b").string()));
  for (int64_t l = 0; l < hf.num_layers; ++l) EXPECT_EQ(hf.skips_rope(l), l % 4 == 3) << l;
  const config::Recipe r = recipe("smollm3_3b.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released("smollm3_3b").string()));
  config::Recipe other = r;
  other.model.no_rope_freq = {3, {}};
  EXPECT_THAT([&] { models::check_recipe_matches(other, hf, "smollm3_3b.json"); },
              ThrowsMessage<InputError>(HasSubstr("model.no_rope_freq (layers without rope) is "
                                                  "[2, 5, 8")));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 3075098624);
  EXPECT_TRUE(report.fits);
}

TEST_F(HfFamilies, SmolLM3NopeLayersFromTheListOrTheInterval) {
  const fs::path d = editable("smollm3");
  edit_config(d, [](nlohmann::json& j) {
    j.erase("no_rope_layers");
    j["no_rope_layer_interval"] = 3;
  });
  const auto m = models::model_from_hf_config(hf::ConfigJson::load((d / "config.json").string()));
  EXPECT_EQ(m.no_rope_freq.every, 3);
  EXPECT_TRUE(m.skips_rope(2));
  EXPECT_FALSE(m.skips_rope(3));
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("smollm3", edit);
  };
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["no_rope_layers"] = {1, 0, 1};
              }),
              HasSubstr("\"no_rope_layers\": must be a list of at least num_hidden_layers (4)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["no_rope_layers"] = {1, 0, 2, 0};
              }),
              HasSubstr("\"no_rope_layers\": entry 2 is 2 (0 or 1)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["use_sliding_window"] = true;
                j["sliding_window"] = 0;
              }),
              HasSubstr("\"sliding_window\": must be > 0 (got 0)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j.erase("no_rope_layers");
                j["no_rope_layer_interval"] = 0;
              }),
              HasSubstr("\"no_rope_layer_interval\": must be > 0 (got 0)"));
}

// A model with NoPE layers has no export that applies rope everywhere; SmolLM3 writes the
// layers back as its no_rope_layers list (1 = rope).
TEST_F(HfFamilies, SmolLM3ExportsOnlyAsSmolLM3) {
  config::ModelConfig m = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("smollm3_list_bf16") / "config.json").string()));
  EXPECT_EQ(m.no_rope_freq.pattern, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(models::decoder_architecture_for(m), "SmolLM3ForCausalLM");
  EXPECT_THAT([&] { models::hf_mappings("LlamaForCausalLM", m, 96); },
              ThrowsMessage<InputError>(HasSubstr("converts as SmolLM3ForCausalLM")));
  const auto j = models::decoder_hf_config(m, "SmolLM3ForCausalLM", "BF16", nullptr);
  EXPECT_EQ(j["no_rope_layers"], nlohmann::json({0, 1, 1, 0}));
  EXPECT_EQ(j["model_type"], "smollm3");
  // No pad id in the original: none, not SmolLM3's default 128004, outside these 96 rows.
  EXPECT_TRUE(j["pad_token_id"].is_null());
  m.no_rope_freq = {0, {}};
  EXPECT_EQ(models::decoder_architecture_for(m), "LlamaForCausalLM");
}

// microsoft/Phi-3-mini-4k-instruct's config.json (fused projections, a 2047-key sliding window)
// is recipes/phi3_mini.yaml's model; transformers builds 3,821,079,552 parameters from it, and so
// does the planner (the vocabulary 32064 needs no padding at tp 1).
TEST_F(HfFamilies, Phi3MiniConfigIsTheRecipeModel) {
  const auto hf =
      models::model_from_hf_config(hf::ConfigJson::load(released("phi3_mini_4k").string()));
  EXPECT_EQ(hf.attention_window(), 2047);
  const config::Recipe r = recipe("phi3_mini.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released("phi3_mini_4k").string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 3821079552);
  EXPECT_TRUE(report.fits);
}

TEST_F(HfFamilies, Phi3AndLongRopeKeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("phi3_longrope", edit);
  };
  EXPECT_THAT(
      error_of([](nlohmann::json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.75; }),
      HasSubstr("model.longrope_short_factor: must hold rotary dims / 2 = 3 values"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["attention_bias"] = true; }),
              HasSubstr("\"attention_bias\": true is not implemented for Phi-3"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["rope_parameters"]["long_factor"] = {1.0, 2.0};
              }),
              HasSubstr("model.longrope_long_factor: must hold rotary dims / 2 = 4 values"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["rope_parameters"]["short_factor"] = {1.0, "x", 1, 1};
              }),
              HasSubstr("longrope short_factor holds \"x\""));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j["rope_parameters"].erase("original_max_position_embeddings");
                j.erase("original_max_position_embeddings");
              }),
              HasSubstr("longrope needs a positive integer original_max_position_embeddings"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["rope_parameters"]["short_factor"][2] = -1.0; }),
              HasSubstr("model.longrope_short_factor[2]: must be a positive number"));
}

// The fused qkv_proj / gate_up_proj tensors of a mis-shaped checkpoint are refused by name.
TEST_F(HfFamilies, Phi3FusedTensorsAreCheckedByShape) {
  const fs::path d = editable("phi3_longrope");
  rewrite(d, [](RawTensors& t) {
    std::get<1>(t["model.layers.0.mlp.gate_up_proj.weight"]) = {48, 64};
  });
  try {
    import(d, "out");
    ADD_FAILURE() << "imported a mis-shaped gate_up_proj";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'model.layers.0.mlp.gate_up_proj.weight' has shape [48,64]"));
  }
}

}  // namespace
}  // namespace megatron
