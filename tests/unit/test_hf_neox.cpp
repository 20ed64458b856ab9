// GPT-NeoX / Pythia (models/gpt/hf_neox.cpp): Pythia-1.4B's config.json describes exactly
// recipes/pythia_1.4b.yaml's model, whose parameters the planner counts as the model card does;
// config keys the converter cannot represent are errors naming the file and key; a native model
// with layer norms and rotary embeddings exports as GPTNeoXForCausalLM; a checkpoint whose head
// is named lm_head (as transformers 5 names it in memory) imports like one with embed_out.
// (Logits and greedy tokens against transformers: test_hf_logits.cpp; round trips and layouts:
// test_hf_conversion.cpp; training layouts: test_neox_equivalence.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "megatron/hf/hf_config.h"
#include "megatron/planning/planner.h"
#include "models/gpt/hf_neox.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

using namespace hf_test;
using ::testing::HasSubstr;

class HfNeoX : public HfScratch {};

// EleutherAI/pythia-1.4b: 24 layers of hidden 2048, the parallel residual, a quarter of each
// head turning; its model card counts 1,414,647,808 parameters, and so does the planner (untied
// head; 50304 rows need no padding at tp 1).
TEST_F(HfNeoX, Pythia14bConfigIsTheRecipeModel) {
  const fs::path config = released("pythia_1.4b");
  const auto hf = models::model_from_hf_config(hf::ConfigJson::load(config.string()));
  EXPECT_TRUE(hf.parallel_residual);
  EXPECT_EQ(hf.rotary_percent, 0.25);
  EXPECT_EQ(hf.rotary_dims(), 32);
  EXPECT_EQ(hf.activation, config::Activation::GeLUExact);
  EXPECT_FALSE(hf.tie_embeddings);
  const config::Recipe r = recipe("pythia_1.4b.yaml");
  EXPECT_NO_THROW(models::check_recipe_matches(r, hf, config.string()));
  const auto report = planning::plan(r, planning::cluster_from_recipe(r), r.model.vocab_size);
  EXPECT_EQ(report.params.total, 1414647808);
  EXPECT_TRUE(report.fits);
  EXPECT_EQ(models::hf_architecture_for(r), models::kGptNeoX);
  EXPECT_EQ(models::hf_architecture_for(recipe("pythia_tiny.yaml")), models::kGptNeoX);
}

TEST_F(HfNeoX, ConfigKeysItCannotRepresentAreNamed) {
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    return edited_config_error("gpt_neox", edit);
  };
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["attention_bias"] = false; }),
              HasSubstr("\"attention_bias\": false (the MLP keeps its biases"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["hidden_act"] = "relu"; }),
              HasSubstr("\"hidden_act\": 'relu' (gelu, gelu_new or gelu_pytorch_tanh convert)"));
  EXPECT_THAT(error_of([](nlohmann::json& j) { j["use_flash_kv"] = true; }),
              HasSubstr("\"use_flash_kv\": is not a key the GPTNeoXForCausalLM converter"));
  EXPECT_THAT(error_of([](nlohmann::json& j) {
                j.erase("rope_parameters");
                j["rotary_pct"] = 1.5;
              }),
              HasSubstr("\"rotary_pct\": 1.5 outside (0, 1]"));
  // transformers 4's spelling: rotary_pct and rotary_emb_base without rope_parameters.
  const fs::path d = editable("gpt_neox");
  edit_config(d, [](nlohmann::json& j) {
    j.erase("rope_parameters");
    j["rotary_pct"] = 0.5;
    j["rotary_emb_base"] = 20000;
  });
  const auto m = models::model_from_hf_config(hf::ConfigJson::load((d / "config.json").string()));
  EXPECT_EQ(m.rotary_percent, 0.5);
  EXPECT_EQ(m.rope_theta, 20000.0);
}

// The head stored as lm_head.weight (renamed in the safetensors header, padded to its length)
// imports to the same native weights as the fixture's embed_out.weight.
TEST_F(HfNeoX, HeadNamedLmHeadImportsToo) {
  const fs::path d = editable("gpt_neox");
  const fs::path file = d / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  const std::string from = "\"embed_out.weight\"", to = "\"lm_head.weight\"";
  const size_t at = header.find(from);
  ASSERT_NE(at, std::string::npos);
  header.replace(at, from.size(), to);
  header.append(from.size() - to.size(), ' ');
  bytes.replace(8, n, header);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  import(fixture("gpt_neox"), "original");
  import(d, "renamed");
  EXPECT_EQ(native_tensors(dir_ / "renamed"), native_tensors(dir_ / "original"));
}

}  // namespace
}  // namespace megatron
