// Megatron-LM checkpoints imported into native ones give Megatron-Core's logits: for every
// fixture of tests/fixtures/megatron (tiny GPT and LLaMA-style models built and saved by
// Megatron-Core itself at tp 2 x pp 2, in the torch_dist and the legacy torch format, with the
// logits of its own forward on fixed tokens; a Mixtral-style model at pp 2 x ep 2;
// tools/gen_megatron_fixtures.py), the import laid out for tp = world size is loaded by
// inference::CausalLM and run on the same tokens: fp32 logits within 1e-5 of the largest.
// mpirun-np: 1 2
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "equivalence_fixture.h"
#include "megatron/inference/causal_lm.h"
#include "models/mlm_import.h"
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
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "megatron" / name;
}

std::vector<float> read_floats(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> out(fs::file_size(path) / sizeof(float));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(fs::file_size(path)));
  return out;
}

void check_logits(const std::string& name, int64_t source_tp = 2, int64_t source_ep = 1) {
  auto& world = mp::testing::world();
  const fs::path scratch = megatron::equivalence::shared_scratch_path("mlm_logits_" + name + "_");
  if (world.rank() == 0) {
    fs::remove_all(scratch);
    models::MegatronImportOptions o;
    o.megatron_dir = fixture(name).string();
    o.out_dir = scratch.string();
    o.tp = world.size();
    const auto r = models::import_megatron_checkpoint(o);
    EXPECT_EQ(r.iteration, 10);
    EXPECT_EQ(r.consumed_samples, 80);
    EXPECT_EQ(r.source_tp, source_tp);
    EXPECT_EQ(r.source_pp, 2);
    EXPECT_EQ(r.source_ep, source_ep);
  }
  world.barrier();
  std::ifstream in(fixture(name) / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto tokens = expected["tokens"].get<std::vector<std::vector<int32_t>>>();
  const int64_t B = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(tokens[0].size());
  const inference::CausalLM lm(scratch.string(), std::nullopt, world, S);
  const auto [tok, lab] = models::testing::next_token_batch(tokens);
  const auto out = lm.forward(tok, lab);
  const int64_t V = lm.vocab_size();
  ASSERT_EQ(V, expected["padded_vocab_size"].get<int64_t>());
  const std::vector<float> theirs = read_floats(fixture(name) / "logits.bin");  // [B, S, V]
  ASSERT_EQ(static_cast<int64_t>(theirs.size()), B * S * V);
  std::vector<float> ours, ref;
  models::testing::paired_logits(
      out.logits, S, B, V, V,
      [&](int64_t b, int64_t s, int64_t v) {
        return theirs[static_cast<size_t>((b * S + s) * V + v)];
      },
      &ours, &ref);
  const double err = megatron::testing::rel_error(ours, ref);
  std::printf("%s tp %d: logits rel error %.3g vs Megatron-Core\n", name.c_str(), world.size(),
              err);
  EXPECT_LE(err, 1e-5) << name;
  world.barrier();
  if (world.rank() == 0) fs::remove_all(scratch);
}

TEST(MegatronLogits, GptTorchDist) { check_logits("gpt_tp2_pp2_torch_dist"); }
TEST(MegatronLogits, GptLegacyTorch) { check_logits("gpt_tp2_pp2_torch"); }
TEST(MegatronLogits, LlamaTorchDist) { check_logits("llama_tp2_pp2_torch_dist"); }
TEST(MegatronLogits, LlamaLegacyTorch) { check_logits("llama_tp2_pp2_torch"); }
// Mixtral-style experts saved at pp 2 x ep 2 (tp 1).
TEST(MegatronLogits, MixtralTorchDist) { check_logits("mixtral_tp1_pp2_ep2_torch_dist", 1, 2); }
TEST(MegatronLogits, MixtralLegacyTorch) { check_logits("mixtral_tp1_pp2_ep2_torch", 1, 2); }

}  // namespace
