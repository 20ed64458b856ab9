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
#include "models/hf_checkpoint.h"
#include "models/model.h"
#include "parallel_test.h"
#include "tests/support/rel_error.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;
namespace mp = megatron::parallel;

fs::path fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name;
}

void check_logits(const std::string& name) {
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
  std::ifstream in(fixture(name) / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto tokens = expected["tokens"].get<std::vector<std::vector<int32_t>>>();
  const int64_t B = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(tokens[0].size());
  const inference::CausalLM lm(scratch.string(), std::nullopt, world, S);
  Tensor tok = Tensor::empty({S, B}, DType::I32), lab = Tensor::empty({S, B}, DType::I32);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      tok.data<int32_t>()[s * B + b] = tokens[b][s];
      lab.data<int32_t>()[s * B + b] = s + 1 < S ? tokens[b][s + 1] : models::kIgnoreIndex;
    }
  const auto out = lm.forward(tok, lab);
  const int64_t V = lm.vocab_size();
  const auto ref = expected["logits"].get<std::vector<std::vector<std::vector<float>>>>();
  ASSERT_EQ(static_cast<int64_t>(ref[0][0].size()), V);
  std::vector<float> ours, theirs;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v) {
        ours.push_back(out.logits.data<float>()[(s * B + b) * V + v]);
        theirs.push_back(ref[b][s][v]);
      }
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
  EXPECT_EQ(recomputed.tokens, greedy) << name;
  world.barrier();
  if (world.rank() == 0) fs::remove_all(scratch);
}

TEST(HfLogits, Gpt2) { check_logits("gpt2"); }
TEST(HfLogits, LlamaBf16) { check_logits("llama_bf16"); }
TEST(HfLogits, LlamaTiedFp16) { check_logits("llama_tied"); }
TEST(HfLogits, Llama31RopeScaling) { check_logits("llama31_scaled"); }
TEST(HfLogits, MistralSharded) { check_logits("mistral_sharded"); }
TEST(HfLogits, Qwen2TiedBf16) { check_logits("qwen2_tied"); }
TEST(HfLogits, Mixtral) { check_logits("mixtral"); }

}  // namespace
