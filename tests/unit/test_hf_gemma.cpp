// Gemma 2 and Gemma 3 (models/gpt/hf_gemma.cpp): the config.json of released checkpoints
// (google/gemma-2-9b, google/gemma-3-1b-it, and the text_config of google/gemma-3-12b-pt as a
// Gemma3ForCausalLM config) describe the models the planner counts as transformers does, the
// last exactly recipes/gemma3_12b.yaml's; Gemma 3's two spellings of its rope settings read the
// same model; config keys the converter cannot represent are errors naming the file and key;
// a Gemma never exports under an architecture that would drop part of it, nor does another
// model export as Gemma. (Logits and greedy tokens against transformers: test_hf_logits.cpp;
// round trips and layouts: test_hf_conversion.cpp; training layouts:
// test_gemma_equivalence.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_gemma.h"
#include "models/gpt/hf_gemma3_multimodal.h"
#include "models/hf_models.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;

config::ModelConfig released_model(const std::string& name) {
  return models::model_from_hf_config(hf::ConfigJson::load(released(name).string()));
}

// The planner's parameter count of `m` on recipes/gemma3_12b.yaml's cluster at tp 1 (Gemma 3
// 1B has a single key/value head).
int64_t planned_params(const config::ModelConfig& m) {
  config::Recipe r = recipe("gemma3_12b.yaml");
  r.model = m;
  r.model.seq_length = 4096;
  r.parallel.tensor = 1;
  r.parallel.sequence_parallel = false;
  return planning::plan(r, planning::cluster_from_recipe(r), m.vocab_size).params.total;
}

class HfGemma : public HfScratch {};

// transformers 5.24 builds 11,766,034,176 parameters from the 12B text config; the planner
// counts those plus the vocabulary padding to 262656 rows (tp 4) of the tied embedding.
TEST_F(HfGemma, Gemma3_12bTextConfigIsTheRecipeModel) {
  const auto hf = released_model("gemma3_12b_text");
  EXPECT_TRUE(hf.qk_layernorm);
  EXPECT_EQ(hf.rope_local_base_freq, 10000.0);
  EXPECT_EQ(hf.rotary_seq_len_interpolation_factor, 8.0);
  EXPECT_EQ(hf.attention_window(), 1024);
  const config::Recipe r = recipe("gemma3_12b.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, released("gemma3_12b_text").string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 11766034176 + (262656 - 262208) * 3840);
  EXPECT_TRUE(report.fits);
  EXPECT_EQ(models::hf_architecture_for(r), models::kGemma3);
  EXPECT_EQ(models::hf_architecture_for(recipe("gemma3_tiny.yaml")), models::kGemma3);
  EXPECT_EQ(models::hf_architecture_for(recipe("gemma2_tiny.yaml")), models::kGemma2);
}

// google/gemma-2-9b: 9,241,705,984 parameters in transformers 5.24; google/gemma-3-1b-it:
// 999,885,952 (their vocabularies need no padding).
TEST_F(HfGemma, ReleasedConfigsAreSizedAsTransformersCountsThem) {
  const auto g2 = released_model("gemma2_9b");
  EXPECT_EQ(g2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(g2.final_logit_softcapping, 30.0);
  EXPECT_EQ(g2.attention_window(), 4096);
  EXPECT_EQ(g2.layer_window(0), 4096);
  EXPECT_EQ(g2.layer_window(1), 0);
  EXPECT_FALSE(g2.softmax_scale);  // query_pre_attn_scalar 256 = head_dim
  EXPECT_EQ(planned_params(g2), 9241705984);
  const auto g3 = released_model("gemma3_1b");
  EXPECT_EQ(g3.rope_theta, 1000000.0);
  EXPECT_EQ(g3.rope_local_base_freq, 10000.0);
  EXPECT_EQ(g3.layer_window(4), 512);
  EXPECT_EQ(g3.layer_window(5), 0);
  EXPECT_EQ(planned_params(g3), 999885952);
}

// google/gemma-3-4b-it (Gemma3ForConditionalGeneration) lists only six text_config keys; the
// rest are Gemma3TextConfig's defaults: transformers 5.24 builds its language model with
// 3,880,263,168 parameters, the planner those plus the padding of the tied table to 262272 rows.
TEST_F(HfGemma, MultimodalConfigReadsItsLanguageModelWithDefaults) {
  const auto c = hf::ConfigJson::load(released("gemma3_4b_it").string());
  const auto m = models::model_from_hf_config(models::gemma3_text_config(c));
  EXPECT_EQ(m.num_attention_heads, 8);
  EXPECT_EQ(m.query_groups(), 4);
  EXPECT_EQ(m.head_dim(), 256);
  EXPECT_EQ(m.vocab_size, 262208);
  EXPECT_EQ(m.rope_local_base_freq, 10000.0);
  EXPECT_EQ(m.rotary_seq_len_interpolation_factor, 8.0);
  EXPECT_EQ(m.layer_window(0), 1024);
  EXPECT_EQ(m.layer_window(5), 0);
  EXPECT_EQ(planned_params(m), 3880263168 + (262272 - 262208) * 2560);
  EXPECT_THAT(edited_config_error("gemma3_multimodal",
                                  [](nlohmann::json& j) {
                                    j["audio_config"] = {{"x", 1}};
                                  }),
              HasSubstr("\"audio_config\": is not a key the Gemma3ForConditionalGeneration"));
}

// The multimodal checkpoint imports its language model (the vision tower and projector left
// out) and exports as the text model, Gemma3ForCausalLM, with the same tensors.
TEST_F(HfGemma, MultimodalCheckpointImportsItsLanguageModel) {
  import(fixture("gemma3_multimodal"), "mm");
  export_to("mm", "mm_hf");
  const auto config = nlohmann::json::parse(std::ifstream(dir_ / "mm_hf" / "config.json"));
  EXPECT_EQ(config["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_FALSE(config.contains("vision_config"));
  const RawTensors source = raw_tensors(fixture("gemma3_multimodal")),
                   out = raw_tensors(dir_ / "mm_hf");
  size_t text = 0;
  for (const auto& [name, t] : source) {
    if (name.rfind("language_model.", 0) != 0) continue;
    ++text;
    const std::string plain = name.substr(std::string("language_model.").size());
    ASSERT_TRUE(out.count(plain)) << plain;
    EXPECT_EQ(out.at(plain), t) << plain;
  }
  EXPECT_EQ(out.size(), text);
}

// transformers 4's spelling (rope_theta, rope_scaling and rope_local_base_freq, no layer_types)
// describes the same model as 5's rope_parameters per layer type.
TEST_F(HfGemma, Gemma3RopeSpellingsReadTheSameModel) {
  const auto five = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("gemma3") / "config.json").string()));
  const fs::path d = editable("gemma3");
  edit_config(d, [](nlohmann::json& j) {
    j.erase("rope_parameters");
    j["rope_theta"] = 1000000.0;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    j["rope_local_base_freq"] = 10000.0;
  });
  const auto four =
      models::model_from_hf_config(hf::ConfigJson::load((d / "config.json").string()));
  EXPECT_TRUE(four == five);
}

TEST_F(HfGemma, ConfigKeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error(name, edit);
  };
  EXPECT_THAT(error_of("gemma2", [](nlohmann::json& j) { j["hidden_activation"] = "gelu"; }),
              HasSubstr("\"hidden_activation\": 'gelu' (the tanh-approximated GELU gate"));
  EXPECT_THAT(error_of("gemma2", [](nlohmann::json& j) { j["attention_bias"] = true; }),
              HasSubstr("\"attention_bias\": true is not implemented"));
  EXPECT_THAT(
      error_of("gemma3", [](nlohmann::json& j) { j["use_bidirectional_attention"] = true; }),
      HasSubstr("\"use_bidirectional_attention\": true (a bidirectional encoder)"));
  EXPECT_THAT(error_of("gemma3",
                       [](nlohmann::json& j) {
                         j["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
                       }),
              HasSubstr("sliding_attention: only the default rope type converts"));
  EXPECT_THAT(error_of("gemma2", [](nlohmann::json& j) { j["rope_local_base_freq"] = 1.0; }),
              HasSubstr("\"rope_local_base_freq\": is not a key the Gemma2ForCausalLM converter"));
  EXPECT_THAT(error_of("gemma3",
                       [](nlohmann::json& j) {
                         j.erase("layer_types");
                         j["sliding_window_pattern"] = 0;
                       }),
              HasSubstr("\"sliding_window_pattern\": must be > 0 (got 0)"));
  EXPECT_THAT(error_of("gemma2", [](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }),
              HasSubstr("\"layer_types\": must list num_hidden_layers (2) entries"));
}

TEST_F(HfGemma, ExportsOnlyAsTheirGemma) {
  config::ModelConfig g2 = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("gemma2") / "config.json").string()));
  config::ModelConfig g3 = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("gemma3") / "config.json").string()));
  for (const char* other : {"LlamaForCausalLM", "Qwen3ForCausalLM", "Olmo2ForCausalLM"})
    EXPECT_THAT([&] { models::hf_mappings(other, g2, 96); },
                ThrowsMessage<InputError>(HasSubstr("model.layernorm_zero_centered_gamma")));
  EXPECT_THAT([&] { models::hf_mappings(models::kGemma2, g3, 96); },
              ThrowsMessage<InputError>(HasSubstr("this model is not one")));
  // A LLaMA is no Gemma, and a softmax scale Gemma's config cannot write is refused.
  const config::ModelConfig llama = models::model_from_hf_config(
      hf::ConfigJson::load((fixture("llama_tied") / "config.json").string()));
  EXPECT_THAT([&] { models::hf_mappings(models::kGemma2, llama, 96); },
              ThrowsMessage<InputError>(HasSubstr("this model is not one")));
  g2.softmax_scale = 0.3;
  EXPECT_THAT([&] { models::hf_config_for(g2, models::kGemma2, "F32", nlohmann::json()); },
              ThrowsMessage<InputError>(HasSubstr("is not 1 / sqrt(an integer)")));
}

}  // namespace
}  // namespace megatron
