// Hugging Face checkpoints imported into native ones give transformers' logits and loss: for
// every fixture of tests/fixtures/hf (small random models saved by transformers itself with
// the logits and causal-LM loss of its forward on fixed tokens; tools/gen_hf_fixtures.py), the
// import (laid out for this tensor-parallel size) is loaded by inference::CausalLM with
// tp = world size and run on the same tokens. fp32 logits within 1e-5 of the largest; greedy
// generation (KV cache, and the full recompute) gives transformers' generate tokens.
// mpirun-np: 1 2
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "equivalence_fixture.h"
#include "megatron/inference/causal_lm.h"
#include "megatron/inference/generate.h"
#include "models/bert/bert_model.h"
#include "models/hf_checkpoint.h"
#include "models/model.h"
#include "parallel_test.h"
#include "tests/support/gpt_model_test_util.h"
#include "tests/support/rel_error.h"
#include "tests/support/test_paths.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;
namespace mp = megatron::parallel;

fs::path fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name;
}

// The fixture imported by rank 0 for tp = world size into a directory every rank sees.
fs::path import_fixture(const std::string& name) {
  auto& world = mp::testing::world();
  const fs::path scratch = megatron::equivalence::shared_scratch_path("hf_logits_" + name + "_");
  if (world.rank() == 0) {
    fs::remove_all(scratch);
    models::HfImportOptions o;
    o.hf_dir = fixture(name).string();
    o.out_dir = scratch.string();
    o.tp = world.size();
    models::import_hf_checkpoint(o);
  }
  world.barrier();
  return scratch;
}

void check_logits(const std::string& name) {
  auto& world = mp::testing::world();
  const fs::path scratch = import_fixture(name);
  std::ifstream in(fixture(name) / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto tokens = expected["tokens"].get<std::vector<std::vector<int32_t>>>();
  const int64_t B = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(tokens[0].size());
  const inference::CausalLM lm(scratch.string(), std::nullopt, world, S);
  const auto [tok, lab] = models::testing::next_token_batch(tokens);
  const auto out = lm.forward(tok, lab);
  const int64_t V = lm.vocab_size();
  const auto ref = expected["logits"].get<std::vector<std::vector<std::vector<float>>>>();
  // Large vocabularies keep only their first columns in the fixture (the loss covers all).
  const int64_t columns = expected.value("logits_columns", V);
  ASSERT_EQ(static_cast<int64_t>(ref[0][0].size()), columns);
  std::vector<float> ours, theirs;
  models::testing::paired_logits(
      out.logits, S, B, V, columns, [&](int64_t b, int64_t s, int64_t v) { return ref[b][s][v]; },
      &ours, &theirs);
  const double err = megatron::testing::rel_error(ours, theirs);
  const double loss = out.loss_sum / static_cast<double>(out.targets);
  std::printf("%s tp %d: logits rel error %.3g, loss %.7f vs transformers %.7f\n", name.c_str(),
              world.size(), err, loss, expected["loss"].get<double>());
  EXPECT_LE(err, 1e-5) << name;
  EXPECT_NEAR(loss, expected["loss"].get<double>(), 1e-5) << name;

  // Greedy decoding through the KV cache: transformers' generate, and the same tokens as
  // recomputing the whole sequence at every step.
  const auto prompt = expected["greedy_prompt"].get<std::vector<int32_t>>();
  const auto greedy = expected["greedy"].get<std::vector<int32_t>>();
  const inference::CausalLM decoder(scratch.string(), std::nullopt, world,
                                    static_cast<int64_t>(prompt.size() + greedy.size()));
  inference::SamplingOptions o;
  o.max_new_tokens = static_cast<int64_t>(greedy.size());
  const auto cached = inference::generate(decoder, prompt, o);
  o.use_cache = false;
  const auto recomputed = inference::generate(decoder, prompt, o);
  EXPECT_EQ(cached.tokens, greedy) << name;
  // transformers' generate without its cache (recorded where it can differ: a rope that follows
  // the sequence length), else the cached tokens.
  EXPECT_EQ(recomputed.tokens, expected.value("greedy_no_cache", greedy)) << name;
  world.barrier();
  if (world.rank() == 0) fs::remove_all(scratch);
}

// BERT: masked-LM logits (token types, a padded sample) and the sentence-pair logits.
void check_bert_logits(const std::string& name) {
  auto& world = mp::testing::world();
  const fs::path scratch = import_fixture(name);
  std::ifstream in(fixture(name) / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto tokens = expected["tokens"].get<std::vector<std::vector<int32_t>>>();
  const auto types = expected["token_types"].get<std::vector<std::vector<int32_t>>>();
  const auto mask = expected["attention_mask"].get<std::vector<std::vector<int32_t>>>();
  const int64_t B = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(tokens[0].size());
  const inference::LoadedModel loaded(scratch.string(), std::nullopt, world, S);
  models::MicroBatch mb;
  mb.tokens = Tensor::empty({S, B}, DType::I32);
  mb.labels = Tensor::empty({S, B}, DType::I32);
  mb.token_types = Tensor::empty({S, B}, DType::I32);
  mb.padding_mask = Tensor::empty({B, S}, DType::U8);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      mb.tokens.data<int32_t>()[s * B + b] = tokens[b][s];
      mb.labels.data<int32_t>()[s * B + b] = models::kIgnoreIndex;
      mb.token_types.data<int32_t>()[s * B + b] = types[b][s];
      mb.padding_mask.data<uint8_t>()[b * S + s] = static_cast<uint8_t>(mask[b][s]);
    }
  const bool nsp = expected.contains("nsp_logits");
  if (nsp) {
    mb.nsp_labels = Tensor::empty({B}, DType::I32);
    for (int64_t b = 0; b < B; ++b) mb.nsp_labels.data<int32_t>()[b] = 0;
  }
  mb.info.training = false;
  const models::Model& model = loaded.model();
  auto act = model.make_activations();
  model.forward(*act, mb);
  const auto& a = dynamic_cast<const models::BertActivations&>(*act);
  const int64_t V = loaded.chunks.vocab_size;
  const Tensor logits = inference::gather_vocab_logits(a.logits, world, V);  // [S*B, V]
  const auto ref = expected["logits"].get<std::vector<std::vector<std::vector<float>>>>();
  std::vector<float> ours, theirs;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      if (!mask[b][s]) continue;  // padded positions: both sides compute garbage there
      for (int64_t v = 0; v < V; ++v) {
        ours.push_back(logits.data<float>()[(s * B + b) * V + v]);
        theirs.push_back(ref[b][s][v]);
      }
    }
  const double err = megatron::testing::rel_error(ours, theirs);
  std::printf("%s tp %d: MLM logits rel error %.3g\n", name.c_str(), world.size(), err);
  EXPECT_LE(err, 1e-5) << name;
  if (nsp) {
    const auto ref_nsp = expected["nsp_logits"].get<std::vector<std::vector<float>>>();
    std::vector<float> o(a.nsp_logits.data<float>(), a.nsp_logits.data<float>() + 2 * B), t;
    for (const auto& row : ref_nsp) t.insert(t.end(), row.begin(), row.end());
    const double nsp_err = megatron::testing::rel_error(o, t);
    std::printf("%s tp %d: next-sentence logits rel error %.3g\n", name.c_str(), world.size(),
                nsp_err);
    EXPECT_LE(nsp_err, 1e-5) << name;
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(scratch);
}

TEST(HfLogits, BertForPreTraining) { check_bert_logits("bert_pretraining"); }
TEST(HfLogits, BertForMaskedLMBf16) { check_bert_logits("bert_mlm_bf16"); }
TEST(HfLogits, Gpt2) { check_logits("gpt2"); }
TEST(HfLogits, LlamaBf16) { check_logits("llama_bf16"); }
TEST(HfLogits, LlamaTiedFp16) { check_logits("llama_tied"); }
TEST(HfLogits, Llama31RopeScaling) { check_logits("llama31_scaled"); }
// llama3 scaling with low/high frequency factors 0.5/6 over 32 original positions.
TEST(HfLogits, Llama3RopeScalingOwnBounds) { check_logits("llama3_rope_custom"); }
TEST(HfLogits, MistralSharded) { check_logits("mistral_sharded"); }
TEST(HfLogits, Qwen2TiedBf16) { check_logits("qwen2_tied"); }
// attention_bias and mlp_bias: q/k/v/o and gate/up/down biases (Megatron's add_bias).
TEST(HfLogits, LlamaWithBiases) { check_logits("llama_bias"); }
// rope_type "linear" (factor 4): Megatron's rotary_seq_len_interpolation_factor.
TEST(HfLogits, LlamaLinearRope) { check_logits("llama_linear_rope"); }

// YaRN: blended frequencies over the correction range and the mscale-ratio concentration on
// cos/sin (position_embedding: yarn).
TEST(HfLogits, LlamaYarn) { check_logits("llama_yarn"); }
// Sliding-window attention over 5 keys (Mistral's sliding_window; model.window_size [4, 0]) on
// 16-token inputs, and greedy decoding with the KV cache past the window.
TEST(HfLogits, MistralSlidingWindow) { check_logits("mistral_sliding"); }
// head_dim 24 != hidden_size / num_attention_heads = 16 (Mistral-NeMo-style): model.kv_channels.
TEST(HfLogits, MistralHeadDim) { check_logits("mistral_head_dim"); }
// Models trained here and exported by convert_checkpoint, read by transformers (the fixture's
// outputs): our export means to transformers what it means to us.
TEST(HfLogits, TrainedLlamaExport) { check_logits("trained_llama"); }
TEST(HfLogits, TrainedGptExport) { check_logits("trained_gpt"); }
TEST(HfLogits, TrainedQwen3Export) { check_logits("trained_qwen3"); }
TEST(HfLogits, TrainedOlmo2Export) { check_logits("trained_olmo2"); }
TEST(HfLogits, TrainedGemma3Export) { check_logits("trained_gemma3"); }
TEST(HfLogits, TrainedSmolLM3Export) { check_logits("trained_smollm3"); }
TEST(HfLogits, TrainedQwen3MoeExport) { check_logits("trained_qwen3_moe"); }
TEST(HfLogits, TrainedQwen2MoeExport) { check_logits("trained_qwen2_moe"); }
// (its expert bias trained away from zero goes out as e_score_correction_bias)
TEST(HfLogits, TrainedDeepseekV3Export) { check_logits("trained_deepseek_v3"); }
TEST(HfLogits, TrainedGptOssExport) { check_logits("trained_gpt_oss"); }
TEST(HfLogits, Mixtral) { check_logits("mixtral"); }
// Qwen2-MoE: top-2 of the softmax over all experts (not renormalized), the shared expert scaled
// by its sigmoid gate, q/k/v biases, a dense layer between routed ones (mlp_only_layers).
// Qwen3-MoE: renormalized top-2 of 8 experts, per-head q/k norms, routed layers every second
// one (decoder_sparse_step 2).
TEST(HfLogits, Qwen2Moe) { check_logits("qwen2_moe"); }
TEST(HfLogits, Qwen3Moe) { check_logits("qwen3_moe"); }
// DeepSeek-V3: multi-latent attention (low-rank queries, interleaved rope dims) and sigmoid
// routing with the e_score_correction_bias, group-limited top-4, scaled gates, a shared expert;
// then plain queries, rope in halves, YaRN with mscale_all_dim (the softmax scale), bf16.
TEST(HfLogits, DeepseekV3) { check_logits("deepseek_v3"); }
TEST(HfLogits, DeepseekV3YarnBf16) { check_logits("deepseek_v3_yarn_bf16"); }
// As released: the layers' linear weights in F8_E4M3 with 16 x 16 weight_scale_inv blocks
// (partial ones too), dequantized as they stream in; transformers' outputs on the dequantized
// weights.
TEST(HfLogits, DeepseekV3Fp8Blocks) { check_logits("deepseek_v3_fp8"); }
// GPT-OSS: learned sinks, biases, alternating windows, fused interleaved experts with the clamped
// unit; and its released form, MXFP4 experts dequantized expert by expert.
TEST(HfLogits, GptOss) { check_logits("gpt_oss"); }
TEST(HfLogits, GptOssMxfp4) { check_logits("gpt_oss_mxfp4"); }
// Per-head q_norm / k_norm before rope (qk_layernorm), head_dim 16 != 32 / 4; and a tied bf16
// one without grouped queries.
TEST(HfLogits, Qwen3) { check_logits("qwen3"); }
// Phi-3: fused qkv_proj / gate_up_proj; LongRoPE's long factors past 8 original positions (the
// 16-token forward, and the KV-cached generation once it passes them); a 5-key sliding window.
TEST(HfLogits, Phi3LongRope) { check_logits("phi3_longrope"); }
TEST(HfLogits, Phi3SlidingBf16) { check_logits("phi3_sliding_bf16"); }
// Partial rotary embeddings (6 of 8 dims: model.rotary_percent 0.75, Phi-4-mini's kind) with
// LongRoPE over those 3 pairs.
TEST(HfLogits, Phi3PartialRotaryLongRope) { check_logits("phi3_partial_longrope"); }
// Dynamic NTK scaling past 8 positions (the base follows the sequence length).
TEST(HfLogits, LlamaDynamicRope) { check_logits("llama_dynamic_rope"); }
TEST(HfLogits, Qwen3TiedBf16) { check_logits("qwen3_tied_bf16"); }
// SmolLM3: NoPE layers (model.no_rope_freq), every second one (tied, fp32) and an explicit list
// (bf16).
TEST(HfLogits, SmolLM3) { check_logits("smollm3"); }
TEST(HfLogits, SmolLM3ListBf16) { check_logits("smollm3_list_bf16"); }
// Per-layer sliding windows (model.window_attn_skip_freq): Qwen2's max_window_layers and
// SmolLM3's windows on its NoPE layers, 5 keys over the 16-token forward and the generation.
TEST(HfLogits, Qwen2WindowLayers) { check_logits("qwen2_window_layers"); }
TEST(HfLogits, SmolLM3Sliding) { check_logits("smollm3_sliding"); }
// GPT-NeoX / Pythia: the parallel residual with a quarter of each head turning (fp32), the
// sequential one with half of it (bf16).
TEST(HfLogits, GptNeoX) { check_logits("gpt_neox"); }
TEST(HfLogits, GptNeoXSequentialBf16) { check_logits("gpt_neox_sequential_bf16"); }
// OLMo-2: output norms, q/k norms over the whole projection (their statistics all-reduced over
// tp at 2 ranks); then head_dim 16, a tied head and linear rope scaling, in bf16.
TEST(HfLogits, Olmo2) { check_logits("olmo2"); }
TEST(HfLogits, Olmo2HeadDimBf16) { check_logits("olmo2_head_dim_bf16"); }
// Gemma 2: 1 + w sandwich norms, scaled embeddings, GeGLU, alternating sliding windows,
// soft-capped scores and logits, query_pre_attn_scalar; tied in bf16. Gemma 3: per-head q/k
// norms, a local rope base on the sliding layers and a linearly scaled global one on the full
// layer; its 5:1 layer pattern, untied, in bf16.
TEST(HfLogits, Gemma2) { check_logits("gemma2"); }
// Gemma 3 multimodal (Gemma3ForConditionalGeneration): its language model, on text.
TEST(HfLogits, Gemma3MultimodalTextModel) { check_logits("gemma3_multimodal"); }
TEST(HfLogits, Gemma2TiedBf16) { check_logits("gemma2_tied_bf16"); }
TEST(HfLogits, Gemma3) { check_logits("gemma3"); }
TEST(HfLogits, Gemma3PatternBf16) { check_logits("gemma3_pattern_bf16"); }

}  // namespace
