// Hugging Face conversion (models/hf_checkpoint.h, megatron/hf): the tensor mappings invert
// exactly; every fixture of tests/fixtures/hf (saved by transformers) goes HF -> native -> HF
// with identical tensor bytes, single-file or sharded; imports straight into tp/pp/ep layouts
// hold the same weights; a model trained here goes native -> HF -> native with identical weights
// and logits; bad input is an error naming the file, key or tensor and leaves nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "data/tokenizer.h"
#include "data/tokenizer_export.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/safetensors.h"
#include "megatron/hf/hf_directory.h"
#include "megatron/hf/tensor_map.h"
#include "megatron/inference/causal_lm.h"
#include "megatron/training/trainer.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"
#include "tests/support/test_paths.h"
#include "tests/unit/hf_test_util.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace st = checkpoint::safetensors;
using ::testing::HasSubstr;
using namespace hf_test;

class HfConversion : public HfScratch {};

// clang-format off
const std::vector<std::string> kFixtures = {
    "gpt2", "llama_bf16", "llama_tied", "llama31_scaled", "mistral_sharded", "qwen2_tied",
    "mixtral", "llama_bias", "llama_linear_rope", "bert_pretraining", "bert_mlm_bf16",
    "mistral_head_dim", "llama_yarn", "mistral_sliding", "qwen3", "qwen3_tied_bf16",
    "llama3_rope_custom", "phi3_longrope", "phi3_sliding_bf16", "llama_dynamic_rope", "smollm3",
    "smollm3_list_bf16", "phi3_partial_longrope", "qwen2_window_layers", "smollm3_sliding",
    "gpt_neox", "gpt_neox_sequential_bf16", "olmo2", "olmo2_head_dim_bf16", "gemma2",
    "gemma2_tied_bf16", "gemma3", "gemma3_pattern_bf16", "qwen2_moe", "qwen3_moe", "deepseek_v3",
    "deepseek_v3_yarn_bf16", "gpt_oss"};
// clang-format on

TEST(HfTensorMap, EveryMappingInvertsExactly) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  auto random = [&](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
  };
  const int64_t H = 4, G = 2, Dh = 3, D = 5;
  const std::vector<hf::TensorMapping> maps = {
      hf::copy_mapping("a", {3, 5}, "a"),
      hf::transpose_mapping("b", {4, 5}, "b"),
      hf::padded_rows_mapping("c", {8, 5}, "c", 6),
      hf::stacked_mapping("d", {2, 3, 5}, {{"g", {3, 5}}, {"u", {3, 5}}}),
      hf::qkv_mapping("e", {(H + 2 * G) * Dh, D},
                      {{"q", {H * Dh, D}}, {"k", {G * Dh, D}}, {"v", {G * Dh, D}}}, H, G, Dh),
      hf::qkv_mapping("f", {(H + 2 * G) * Dh}, {{"q", {H * Dh}}, {"k", {G * Dh}}, {"v", {G * Dh}}},
                      H, G, Dh),
      hf::fused_qkv_mapping("h", {3 * H * Dh, D}, {"c_attn", {D, 3 * H * Dh}, true}, H, H, Dh),
  };
  for (const auto& m : maps) {
    m.validate();
    std::vector<std::vector<float>> sources;
    for (const auto& s : m.sources) sources.push_back(random(s.shape));
    const std::vector<float> native = m.import(sources);
    EXPECT_EQ(m.export_sources(native), sources) << m.native;
  }
  // QKV rows per group: group 0 holds q heads 0-1, then k head 0, then v head 0.
  const auto& qkv = maps[5];
  std::vector<std::vector<float>> src = {random({H * Dh}), random({G * Dh}), random({G * Dh})};
  const auto native = qkv.import(src);
  EXPECT_EQ(native[2 * Dh], src[1][0]);       // k of group 0 after its two q heads
  EXPECT_EQ(native[3 * Dh], src[2][0]);       // then v
  EXPECT_EQ(native[4 * Dh], src[0][2 * Dh]);  // group 1's first q head
  // Padding rows are zero.
  const auto padded = maps[2].import({random({6, 5})});
  EXPECT_EQ(padded[6 * 5], 0.0f);
  // A mapping that uses a source row twice is a bug, reported.
  hf::TensorMapping bad = hf::copy_mapping("x", {2, 2}, "x");
  bad.blocks = {{0, 0, 1}, {0, 0, 1}};
  EXPECT_THROW(bad.validate(), Error);
}

TEST_F(HfConversion, EveryFixtureRoundTripsBitIdentical) {
  for (const std::string& name : kFixtures) {
    SCOPED_TRACE(name);
    import(fixture(name), name);
    export_to(name, name + "_hf");
    EXPECT_EQ(raw_tensors(dir_ / (name + "_hf")), raw_tensors(fixture(name)));
    EXPECT_TRUE(fs::exists(dir_ / (name + "_hf") / "config.json"));
    // Sharded output: several files and the index, the same tensors.
    export_to(name, name + "_sharded", 20000);
    EXPECT_TRUE(fs::exists(dir_ / (name + "_sharded") / "model.safetensors.index.json"));
    EXPECT_EQ(raw_tensors(dir_ / (name + "_sharded")), raw_tensors(fixture(name)));
    // And back in: the same native weights.
    import(dir_ / (name + "_sharded"), name + "_again");
    EXPECT_EQ(native_tensors(dir_ / (name + "_again")), native_tensors(dir_ / name));
  }
}

TEST_F(HfConversion, ConfigJsonRoundTripsTheModel) {
  for (const std::string& name : kFixtures) {
    SCOPED_TRACE(name);
    import(fixture(name), name);
    export_to(name, name + "_hf");
    std::ifstream a(fixture(name) / "config.json"), b(dir_ / (name + "_hf") / "config.json");
    const auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
    for (const auto& [key, value] : ja.items()) {
      if (key != "dtype" && key != "torch_dtype" && key != "rope_parameters") {
        EXPECT_EQ(jb[key], value) << key;
      }
    }
    // The re-exported config describes the same model section.
    const auto ma = models::model_from_hf_config(
        hf::ConfigJson::load((fixture(name) / "config.json").string()));
    const auto mb = models::model_from_hf_config(
        hf::ConfigJson::load((dir_ / (name + "_hf") / "config.json").string()));
    EXPECT_TRUE(ma == mb);
  }
}

TEST_F(HfConversion, ImportsIntoLayoutsHoldTheSameWeights) {
  struct Case {
    std::string fixture;
    int64_t tp, pp, ep;
  };
  for (const Case& c :
       {Case{"gpt2", 2, 2, 1}, Case{"llama_tied", 2, 1, 1}, Case{"mixtral", 2, 2, 2},
        Case{"mixtral", 1, 1, 4}, Case{"mistral_head_dim", 2, 2, 1}, Case{"qwen3", 2, 2, 1},
        Case{"phi3_longrope", 2, 2, 1}, Case{"gpt_neox", 2, 2, 1}, Case{"olmo2", 2, 2, 1},
        Case{"gemma2", 2, 2, 1}, Case{"gemma3", 2, 1, 1}, Case{"qwen2_moe", 2, 1, 2},
        Case{"qwen3_moe", 2, 2, 2}, Case{"qwen3_moe", 1, 1, 4}, Case{"deepseek_v3", 2, 1, 2},
        Case{"deepseek_v3", 1, 1, 4}, Case{"deepseek_v3_yarn_bf16", 2, 2, 1},
        Case{"gpt_oss", 2, 3, 2}, Case{"gpt_oss", 1, 1, 4}}) {
    SCOPED_TRACE(concat(c.fixture, " tp", c.tp, " pp", c.pp, " ep", c.ep));
    const std::string one = c.fixture + "_one", laid = concat(c.fixture, c.tp, c.pp, c.ep);
    if (!fs::exists(dir_ / one)) import(fixture(c.fixture), one);
    import(fixture(c.fixture), laid, c.tp, c.pp, c.ep);
    const checkpoint::CheckpointIndex index = checkpoint::read_index((dir_ / laid).string());
    EXPECT_EQ(index.files.size(), static_cast<size_t>(c.tp * c.pp * c.ep)) << "one shard per rank";
    const int64_t vocab = 96;
    EXPECT_EQ(native_tensors(dir_ / laid, vocab), native_tensors(dir_ / one, vocab));
    // The export of a layout is the fixture again.
    export_to(laid, laid + "_hf");
    EXPECT_EQ(raw_tensors(dir_ / (laid + "_hf")), raw_tensors(fixture(c.fixture)));
  }
}

// ---- a model trained here, out and back ----------------------------------------------------

TEST_F(HfConversion, TrainedModelsGoOutAndBackExactly) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"llama",
       "arch: llama, num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, "
       "activation: swiglu, position_embedding: rope, tie_embeddings: false, "
       "add_bias: false"},
      {"gpt", "arch: gpt, max_position_embeddings: 16"},
      {"mixtral",
       "arch: llama, ffn_hidden_size: 48, normalization: rmsnorm, activation: swiglu, "
       "position_embedding: rope, tie_embeddings: false, add_bias: false, "
       "num_experts: 4, moe_router_topk: 2, moe_aux_loss_coeff: 0.01"},
      {"qwen2",
       "arch: llama, num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, "
       "activation: swiglu, position_embedding: rope, add_bias: false, "
       "add_qkv_bias: true"},
      // Qwen2-MoE: pre-softmax top-2, a gated shared expert, q/k/v biases, a dense layer
      {"qwen2_moe",
       "arch: llama, num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, "
       "activation: swiglu, position_embedding: rope, tie_embeddings: false, add_bias: false, "
       "add_qkv_bias: true, num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 24, "
       "moe_router_pre_softmax: true, moe_shared_expert_intermediate_size: 16, "
       "moe_shared_expert_gate: true, moe_layer_freq: [1, 0], moe_aux_loss_coeff: 0.001"},
      // Qwen3-MoE: renormalized top-2, per-head q/k norms, the first layer dense
      {"qwen3_moe",
       "arch: llama, num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, "
       "activation: swiglu, position_embedding: rope, tie_embeddings: false, add_bias: false, "
       "qk_layernorm: true, num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 24, "
       "moe_layer_freq: [0, 1], moe_aux_loss_coeff: 0.001"},
      // DeepSeek-V3: MLA, the first layer dense, sigmoid routing with the expert bias (trained
      // away from zero), grouped, scaled, a shared expert
      {"deepseek_v3",
       "arch: llama, ffn_hidden_size: 48, normalization: rmsnorm, activation: swiglu, "
       "position_embedding: rope, tie_embeddings: false, add_bias: false, "
       "multi_latent_attention: true, q_lora_rank: 12, kv_lora_rank: 8, qk_head_dim: 8, "
       "qk_pos_emb_head_dim: 4, v_head_dim: 6, num_experts: 4, moe_router_topk: 2, "
       "moe_ffn_hidden_size: 16, moe_router_score_function: sigmoid, "
       "moe_router_enable_expert_bias: true, moe_router_bias_update_rate: 0.05, "
       "moe_router_num_groups: 2, moe_router_group_topk: 1, moe_router_topk_scaling_factor: 2.5, "
       "moe_shared_expert_intermediate_size: 16, moe_layer_freq: [0, 1]"},
      // head dimension 12, not 32 / 4: exported as head_dim, imported back as kv_channels
      {"llama_kv_channels",
       "arch: llama, num_query_groups: 2, kv_channels: 12, ffn_hidden_size: 48, "
       "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
       "tie_embeddings: false, add_bias: false"},
      // per-head q/k norms (trained away from their initial ones) and head_dim 12
      {"qwen3",
       "arch: llama, num_query_groups: 2, kv_channels: 12, ffn_hidden_size: 48, "
       "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
       "add_bias: false, qk_layernorm: true"},
      // OLMo-2: output norms only, q/k norms over the whole projections
      {"olmo2",
       "arch: llama, num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, "
       "activation: swiglu, position_embedding: rope, tie_embeddings: false, add_bias: false, "
       "qk_layernorm: true, qk_layernorm_span: projection, sublayer_input_norm: false, "
       "sublayer_output_norm: true"}};
  for (const auto& [name, model] : models) {
    SCOPED_TRACE(name);
    const fs::path ckpt = dir_ / name;
    const std::string yaml = trained_recipe(model, ckpt);
    {
      auto src = std::make_shared<CountingSource>();
      auto world = parallel::make_single_process_communicator();
      std::ostringstream log;
      training::Trainer t(config::parse_recipe_string(yaml, "trained.yaml"), 61, src, src, *world,
                          log);
      t.run();
    }
    export_to(name, name + "_hf");
    // Back in, checked against the recipe the model was trained with.
    const fs::path recipe = dir_ / (name + ".yaml");
    std::ofstream(recipe) << yaml;
    models::HfImportOptions o;
    o.hf_dir = (dir_ / (name + "_hf")).string();
    o.out_dir = (dir_ / (name + "_back")).string();
    o.recipe = recipe.string();
    models::import_hf_checkpoint(o);
    EXPECT_EQ(native_tensors(dir_ / (name + "_back"), 61), native_tensors(ckpt, 61));
    // The same logits from the trained checkpoint and from its round trip.
    auto tp = parallel::make_single_process_communicator();
    const inference::CausalLM a(ckpt.string(), std::nullopt, *tp),
        b((dir_ / (name + "_back")).string(), std::nullopt, *tp);
    Tensor tokens = Tensor::empty({8, 2}, DType::I32);
    for (int64_t i = 0; i < 16; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>(i * 7 % 61);
    const Tensor la = a.forward(tokens).logits, lb = b.forward(tokens).logits;
    ASSERT_EQ(la.numel(), lb.numel());
    EXPECT_EQ(0, std::memcmp(la.raw(), lb.raw(), static_cast<size_t>(la.numel()) * 4));
    const auto config = nlohmann::json::parse(std::ifstream(dir_ / (name + "_hf") / "config.json"));
    if (name == "llama_kv_channels") {
      EXPECT_EQ(config["head_dim"], 12);
    }
    if (name == "qwen3") {
      EXPECT_EQ(config["architectures"][0], "Qwen3ForCausalLM");
    }
    if (name == "olmo2") {
      EXPECT_EQ(config["architectures"][0], "Olmo2ForCausalLM");
    }
    if (name == "deepseek_v3") {
      EXPECT_EQ(config["architectures"][0], "DeepseekV3ForCausalLM");
      EXPECT_EQ(config["rope_interleave"], true);
      EXPECT_EQ(config["first_k_dense_replace"], 1);
      EXPECT_EQ(config["n_shared_experts"], 1);
      // The expert bias went out as e_score_correction_bias and came back.
      const checkpoint::CheckpointIndex back =
          checkpoint::read_index((dir_ / (name + "_back")).string());
      EXPECT_TRUE(back.tensors.count("moe/expert_bias/layers.1"));
    }
    if (name == "qwen2_moe") {
      EXPECT_EQ(config["architectures"][0], "Qwen2MoeForCausalLM");
      EXPECT_EQ(config["norm_topk_prob"], false);
      EXPECT_EQ(config["mlp_only_layers"], nlohmann::json::array({1}));
    }
    if (name == "qwen3_moe") {
      EXPECT_EQ(config["architectures"][0], "Qwen3MoeForCausalLM");
      EXPECT_EQ(config["norm_topk_prob"], true);
      EXPECT_EQ(config["mlp_only_layers"], nlohmann::json::array({0}));
    }
  }
}

// The export of a model trained with a SentencePiece model carries it as tokenizer.model with a
// tokenizer_config.json: transformers' AutoTokenizer loaded trained_gemma3's export as a
// LlamaTokenizer and gave the ids the model was trained on (expected.json, from
// tools/gen_hf_fixtures.py --from-export). GPT-2's vocab.json + merges.txt travel as they are.
TEST_F(HfConversion, ExportedTokenizersLoadInTransformersWithOurIds) {
  const fs::path dir = fixture("trained_gemma3");
  const nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  EXPECT_EQ(expected["tokenizer_class"], "LlamaTokenizer");
  const fs::path spm = fs::path(MEGATRON_SOURCE_DIR) / "tokenizers" / "corpus_spm_8k.model";
  const auto ours =
      data::make_tokenizer({config::TokenizerType::SentencePiece, "", "", spm.string()});
  const auto texts = expected["tokenizer_texts"].get<std::vector<std::string>>();
  const auto ids = expected["tokenizer_ids"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(texts.size(), ids.size());
  for (size_t k = 0; k < texts.size(); ++k) EXPECT_EQ(ours->encode(texts[k]), ids[k]) << texts[k];
  // What the export writes is what transformers loaded.
  const auto files = data::sentencepiece_hf_files(spm.string());
  EXPECT_EQ(files.at("tokenizer.model"),
            checkpoint::io::read_file((dir / "tokenizer.model").string()));
  EXPECT_EQ(files.at("tokenizer_config.json"),
            checkpoint::io::read_file((dir / "tokenizer_config.json").string()));
  const fs::path gpt2 = fs::path(MEGATRON_SOURCE_DIR) / "tokenizers" / "gpt2";
  const auto g =
      data::gpt2_hf_files((gpt2 / "vocab.json").string(), (gpt2 / "merges.txt").string());
  EXPECT_EQ(g.at("merges.txt"), checkpoint::io::read_file((gpt2 / "merges.txt").string()));
  EXPECT_EQ(nlohmann::json::parse(g.at("tokenizer_config.json"))["tokenizer_class"],
            "GPT2Tokenizer");
}

TEST_F(HfConversion, BadInputIsNamedAndLeavesNothing) {
  auto error_of = [&](const fs::path& hf) -> std::string {
    try {
      import(hf, "out");
    } catch (const InputError& e) {
      EXPECT_FALSE(fs::exists(dir_ / "out" / "latest"));
      EXPECT_FALSE(fs::exists(dir_ / "out" / "iter_0000000"));
      return e.what();
    }
    ADD_FAILURE() << "imported " << hf;
    return "";
  };
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  {
    const fs::path d = editable("llama_bf16");
    rewrite(d, [&](RawTensors& t) { t.erase(q); });
    EXPECT_THAT(error_of(d), HasSubstr("no tensor '" + q + "'"));
  }
  {
    const fs::path d = editable("llama_bf16");
    rewrite(d, [&](RawTensors& t) { t["model.layers.5.extra.weight"] = t[q]; });
    EXPECT_THAT(error_of(d), HasSubstr("'model.layers.5.extra.weight' is not part of the model"));
  }
  {
    const fs::path d = editable("llama_bf16");
    rewrite(d, [&](RawTensors& t) { std::get<1>(t[q]) = {16, 64}; });
    EXPECT_THAT(error_of(d), HasSubstr("tensor '" + q + "' has shape [16,64]"));
  }
  {
    const fs::path d = editable("llama_bf16");
    rewrite(d, [&](RawTensors& t) { std::get<0>(t[q]) = "I16"; });
    EXPECT_THAT(error_of(d), HasSubstr("has dtype I16"));
  }
  {
    const fs::path d = editable("gpt2");
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
    EXPECT_THAT(error_of(d), HasSubstr("model.safetensors"));
  }
  {
    const fs::path d = editable("mistral_sharded");
    fs::remove(d / "model-00003-of-00005.safetensors");
    EXPECT_THAT(error_of(d), HasSubstr("model-00003-of-00005.safetensors"));
  }
  {
    const fs::path d = editable("gpt2");
    edit_config(d, [](nlohmann::json& j) { j["architectures"] = {"FalconForCausalLM"}; });
    EXPECT_THAT(error_of(d), HasSubstr("'FalconForCausalLM' is not one this build converts"));
  }
  {
    const fs::path d = editable("llama_tied");
    edit_config(d, [](nlohmann::json& j) { j["attn_logit_softcapping"] = 50.0; });
    EXPECT_THAT(error_of(d), HasSubstr("\"attn_logit_softcapping\": is not a key"));
  }
  {
    // Biases on the attention only: no Megatron equivalent (add_bias is all projections).
    const fs::path d = editable("llama_tied");
    edit_config(d, [](nlohmann::json& j) { j["attention_bias"] = true; });
    EXPECT_THAT(error_of(d), HasSubstr("\"attention_bias\": true only with the other true too"));
  }
  {
    const fs::path d = editable("llama_tied");
    edit_config(d, [](nlohmann::json& j) { j["hidden_act"] = "gelu"; });
    EXPECT_THAT(error_of(d), HasSubstr("config.json: \"hidden_act\""));
  }
  {
    const fs::path d = editable("llama_tied");
    edit_config(d, [](nlohmann::json& j) {
      j["rope_parameters"] = {{"rope_type", "fancy"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
    });
    EXPECT_THAT(error_of(d), HasSubstr("rope type 'fancy' is not implemented"));
  }
  {  // yarn without the pretraining context it extends
    const fs::path d = editable("llama_tied");
    edit_config(d, [](nlohmann::json& j) {
      j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
    });
    EXPECT_THAT(error_of(d), HasSubstr("\"rope_parameters\": yarn needs a positive "
                                       "original_max_position_embeddings"));
  }
  {  // an attention_factor other than the derived concentration has no recipe key
    const fs::path d = editable("llama_yarn");
    edit_config(d, [](nlohmann::json& j) { j["rope_parameters"]["attention_factor"] = 1.5; });
    EXPECT_THAT(error_of(d), HasSubstr("yarn attention_factor 1.5 differs"));
  }
  {  // the Qwen MoE layer keys
    const fs::path d = editable("qwen3_moe");
    edit_config(d, [](nlohmann::json& j) { j["decoder_sparse_step"] = 0; });
    EXPECT_THAT(error_of(d), HasSubstr("\"decoder_sparse_step\": must be >= 1 (got 0)"));
    edit_config(d, [](nlohmann::json& j) {
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = {0, 7};
    });
    EXPECT_THAT(error_of(d), HasSubstr("\"mlp_only_layers\": has 7 (layer indices in [0, 4)"));
    edit_config(d, [](nlohmann::json& j) { j["mlp_only_layers"] = {0, 1, 2, 3}; });
    EXPECT_THAT(error_of(d), HasSubstr("leaves no layer with experts"));
    edit_config(d, [](nlohmann::json& j) {
      j["mlp_only_layers"] = nlohmann::json::array();
      j["num_experts"] = 6;
    });
    EXPECT_THAT(error_of(d), HasSubstr("\"num_local_experts\": 8 differs from num_experts 6"));
  }
  {
    const fs::path d = editable("qwen2_moe");
    edit_config(d, [](nlohmann::json& j) { j["shared_expert_intermediate_size"] = 0; });
    EXPECT_THAT(error_of(d), HasSubstr("\"shared_expert_intermediate_size\": must be > 0"));
  }
  {  // a tensor of the shared expert's gate missing
    const fs::path d = editable("qwen2_moe");
    const std::string g = "model.layers.2.mlp.shared_expert_gate.weight";
    rewrite(d, [&](RawTensors& t) { t.erase(g); });
    EXPECT_THAT(error_of(d), HasSubstr("no tensor '" + g + "'"));
  }
  {
    const fs::path d = editable("gpt2");
    std::ofstream(d / "config.json") << "{\"architectures\": [";
    EXPECT_THAT(error_of(d), HasSubstr("config.json: invalid JSON"));
  }
  {
    const fs::path d = editable("gpt2");
    fs::remove(d / "model.safetensors");
    std::ofstream(d / "pytorch_model.bin") << "x";
    EXPECT_THAT(error_of(d), HasSubstr("pytorch_model.bin"));
  }
  EXPECT_THAT(error_of(dir_ / "nowhere"), HasSubstr("does not exist"));
  // Nothing overwritten: a second import into the same place, an export into a non-empty dir.
  import(fixture("gpt2"), "out");
  try {
    import(fixture("gpt2"), "out");
    ADD_FAILURE() << "imported over a checkpoint";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already holds a checkpoint"));
  }
  fs::create_directories(dir_ / "full");
  std::ofstream(dir_ / "full" / "keep.txt") << "mine";
  EXPECT_THROW(export_to("out", "full"), InputError);
  EXPECT_TRUE(fs::exists(dir_ / "full" / "keep.txt"));
  // A recipe that is not config.json's model.
  const fs::path recipe = dir_ / "wrong.yaml";
  std::ofstream(recipe) << trained_recipe("arch: gpt, max_position_embeddings: 32", dir_ / "x");
  models::HfImportOptions o;
  o.hf_dir = fixture("gpt2").string();
  o.out_dir = (dir_ / "with_recipe").string();
  o.recipe = recipe.string();
  try {
    models::import_hf_checkpoint(o);
    ADD_FAILURE() << "a mismatching recipe imported";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("wrong.yaml: model.vocab_size is 61 but "));
    EXPECT_THAT(e.what(), HasSubstr("gpt2/config.json describes 96"));
  }
  // Nothing half-written is left in the export's parent either.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// A model fine-tuned with a chat template exports it as tokenizer_config.json's chat_template:
// the Jinja that made the chat-template fixtures' ids with transformers (templates.json).
TEST_F(HfConversion, FineTunedExportCarriesItsChatTemplate) {
  const fs::path chatml = fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";
  std::string yaml = trained_recipe(
      "arch: llama, normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "add_bias: false, tie_embeddings: false",
      dir_ / "sft");
  const std::string mock = "data: {tokenizer: {type: NullTokenizer, vocab_size: 61}, mock: true}";
  yaml.replace(yaml.find(mock), mock.size(),
               concat("data: {tokenizer: {type: HuggingFaceTokenizer, model: ",
                      (chatml / "chatml").string(), "}, sft: {train: [{path: ", MEGATRON_SOURCE_DIR,
                      "/data/finetune/book_id_train.jsonl}], ", "chat_template: chatml}}"));
  {
    auto src = std::make_shared<CountingSource>();
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(config::parse_recipe_string(yaml, "sft.yaml"), 61, src, src, *world, log);
    t.run();
  }
  export_to("sft", "sft_hf");
  const auto config =
      nlohmann::json::parse(std::ifstream(dir_ / "sft_hf" / "tokenizer_config.json"));
  const auto templates = nlohmann::json::parse(std::ifstream(chatml / "templates.json"));
  ASSERT_TRUE(config.contains("chat_template"));
  EXPECT_EQ(config["chat_template"], templates["chatml"]);
}

// ---- head_dim (model.kv_channels) ------------------------------------------------------------

TEST_F(HfConversion, HeadDimIsKvChannels) {
  auto model_of = [](const fs::path& dir) {
    return models::model_from_hf_config(hf::ConfigJson::load((dir / "config.json").string()));
  };
  const config::ModelConfig m = model_of(fixture("mistral_head_dim"));
  EXPECT_EQ(m.kv_channels, 24);
  EXPECT_EQ(m.head_dim(), 24);
  // head_dim equal to hidden / heads (or absent) leaves kv_channels unset: recipes as before.
  EXPECT_EQ(model_of(fixture("mistral_sharded")).kv_channels, 0);
  {
    const fs::path d = editable("mistral_head_dim");
    edit_config(d, [](nlohmann::json& j) { j["head_dim"] = 16; });
    EXPECT_EQ(model_of(d).kv_channels, 0);
    EXPECT_EQ(model_of(d).head_dim(), 16);
  }
  {
    // The heads need not divide hidden_size when head_dim is given (as in Megatron-Core).
    const fs::path d = editable("mistral_head_dim");
    edit_config(d, [](nlohmann::json& j) { j["hidden_size"] = 62; });
    EXPECT_EQ(model_of(d).kv_channels, 24);
  }
  EXPECT_THAT(edited_config_error("mistral_head_dim",
                                  [](nlohmann::json& j) {
                                    j["hidden_size"] = 62;
                                    j.erase("head_dim");
                                  }),
              HasSubstr("\"num_attention_heads\": must divide hidden_size"));
  EXPECT_THAT(edited_config_error("mistral_head_dim", [](nlohmann::json& j) { j["head_dim"] = 0; }),
              HasSubstr("\"head_dim\": must be > 0 (got 0)"));
  EXPECT_THAT(  // rope needs it even
      edited_config_error("mistral_head_dim", [](nlohmann::json& j) { j["head_dim"] = 23; }),
      HasSubstr("model.kv_channels: must be even"));
  // A recipe must give the same head dimension as config.json.
  const std::string recipe_yaml =
      "model: {arch: llama, num_layers: 2, hidden_size: 64, num_attention_heads: 4, "
      "num_query_groups: 2, kv_channels: KV, ffn_hidden_size: 48, seq_length: 16, "
      "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "tie_embeddings: false, add_bias: false, vocab_size: 96, layernorm_epsilon: 1.0e-5}\n"
      "training: {micro_batch_size: 1, global_batch_size: 1, train_iters: 1}\n"
      "optimizer: {lr: 0.01}\n"
      "data: {tokenizer: {type: NullTokenizer, vocab_size: 96}, mock: true}\n";
  auto with_kv = [&](const std::string& kv) {
    std::string y = recipe_yaml;
    y.replace(y.find("KV"), 2, kv);
    const fs::path p = dir_ / ("kv" + kv + ".yaml");
    std::ofstream(p) << y;
    return p;
  };
  models::HfImportOptions o;
  o.hf_dir = fixture("mistral_head_dim").string();
  o.out_dir = (dir_ / "wrong_kv").string();
  o.recipe = with_kv("16").string();
  try {
    models::import_hf_checkpoint(o);
    ADD_FAILURE() << "a recipe with another kv_channels imported";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kv16.yaml: model.kv_channels is 16 but "));
    EXPECT_THAT(e.what(), HasSubstr("mistral_head_dim/config.json describes 24"));
  }
  o.out_dir = (dir_ / "right_kv").string();
  o.recipe = with_kv("24").string();
  models::import_hf_checkpoint(o);
  export_to("right_kv", "right_kv_hf");
  EXPECT_EQ(raw_tensors(dir_ / "right_kv_hf"), raw_tensors(fixture("mistral_head_dim")));
  const auto exported = nlohmann::json::parse(std::ifstream(dir_ / "right_kv_hf" / "config.json"));
  EXPECT_EQ(exported["head_dim"], 24);
}

// GPT-2 and BERT have no head_dim: a model whose query width is not hidden_size has no export.
TEST_F(HfConversion, GptWithKvChannelsHasNoExport) {
  const fs::path ckpt = dir_ / "gpt_kv";
  {
    const std::string yaml =
        trained_recipe("arch: gpt, max_position_embeddings: 16, kv_channels: 12", ckpt);
    auto src = std::make_shared<CountingSource>();
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(config::parse_recipe_string(yaml, "gpt_kv.yaml"), 61, src, src, *world,
                        log);
    t.run();
  }
  try {
    export_to("gpt_kv", "gpt_kv_hf");
    ADD_FAILURE() << "exported a GPT with kv_channels 12 as GPT2LMHeadModel";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.kv_channels 12 gives a query width 48"));
    EXPECT_THAT(e.what(), HasSubstr("GPT2LMHeadModel has no head_dim"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "gpt_kv_hf" / "config.json"));
}

}  // namespace
}  // namespace megatron
