// A LoRA run exported to Hugging Face (models::export_hf_checkpoint) carries the adapters merged
// into the weights, W + (alpha / r) B A (gated SwiGLU fc1 and fused qkv included): the export,
// imported back, gives the LoRA checkpoint's logits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/inference/causal_lm.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/trainer.h"
#include "models/hf_checkpoint.h"
#include "models/hf_peft.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;

class LoraExport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("megatron_lora_export_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LoraExport, MergedExportReproducesTheAdaptedModel) {
  const std::string native = (dir_ / "lora").string(), hf = (dir_ / "hf").string(),
                    back = (dir_ / "back").string();
  const config::Recipe r = config::parse_recipe_string(
      "model: {arch: llama, num_layers: 2, hidden_size: 32, num_attention_heads: 4, "
      "num_query_groups: 2, ffn_hidden_size: 48, seq_length: 16, normalization: rmsnorm, "
      "activation: swiglu, position_embedding: rope, add_bias: false, tie_embeddings: false, "
      "make_vocab_size_divisible_by: 8}\n"
      "training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 6, eval_interval: 0, "
      "peak_tflops: 1.0}\n"
      "optimizer: {lr: 0.05, schedule: {warmup_iters: 0}}\n"
      "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: 40}}\n"
      "peft: {type: lora, dim: 4, alpha: 8}\n"
      "checkpoint: {save: " +
          native + "}\nlogging: {interval: 1000}\n",
      "lora_export.yaml");
  {
    auto src = std::make_shared<training::MockTokenSource>(16, 40, 3);
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(r, 40, src, nullptr, *world, log);
    t.run();
  }
  // The adapters moved away from B = 0.
  {
    checkpoint::Reader reader(native);
    const auto& tensors = reader.index().tensors;
    const std::string b = "model/layers.0.mlp.fc1.lora_b.weight";
    ASSERT_TRUE(tensors.count(b));
    EXPECT_EQ(tensors.at(b).shape, (std::vector<int64_t>{2, 48, 4}));
    const std::vector<float> v = reader.read_whole(b);
    float largest = 0;
    for (float x : v) largest = std::max(largest, std::abs(x));
    EXPECT_GT(largest, 1e-3f);
  }
  models::HfExportOptions e;
  e.native_dir = native;
  e.hf_dir = hf;
  models::export_hf_checkpoint(e);
  models::HfImportOptions i;
  i.hf_dir = hf;
  i.out_dir = back;
  models::import_hf_checkpoint(i);

  auto tp = parallel::make_single_process_communicator();
  const inference::CausalLM adapted(native, std::nullopt, *tp), merged(back, std::nullopt, *tp);
  Tensor tokens = Tensor::empty({16, 2}, DType::I32);
  for (int64_t k = 0; k < 32; ++k) tokens.data<int32_t>()[k] = static_cast<int32_t>((k * 7) % 40);
  const Tensor a = adapted.forward(tokens).logits, b = merged.forward(tokens).logits;
  ASSERT_EQ(a.numel(), b.numel());
  double diff = 0, scale = 0;
  for (int64_t k = 0; k < a.numel(); ++k) {
    diff = std::max(diff, double(std::abs(a.data<float>()[k] - b.data<float>()[k])));
    scale = std::max(scale, double(std::abs(a.data<float>()[k])));
  }
  EXPECT_LT(diff, 1e-5 * scale) << "max |logit| " << scale;
}

// tests/fixtures/hf/lora_peft (tools/gen_peft_fixtures.py): a LoRA checkpoint trained here, its
// export as a base model + PEFT adapter, and the logits Hugging Face peft computed from that
// export. Our model's logits equal peft's (so peft reads our adapter as our model), and exporting
// the checkpoint again writes the same adapter.
TEST_F(LoraExport, PeftLoadsOurAdapterAsOurModel) {
  const fs::path fixture = fs::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/hf/lora_peft";
  const nlohmann::json expected = nlohmann::json::parse(std::ifstream(fixture / "expected.json"));
  const auto ids = expected["ids"].get<std::vector<std::vector<int32_t>>>();
  const int64_t B = static_cast<int64_t>(ids.size()), S = static_cast<int64_t>(ids[0].size());
  Tensor tokens = Tensor::empty({S, B}, DType::I32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) tokens.data<int32_t>()[s * B + b] = ids[b][s];
  auto tp = parallel::make_single_process_communicator();
  const inference::CausalLM lm((fixture / "lora").string(), std::nullopt, *tp);
  const Tensor logits = lm.forward(tokens).logits;
  const int64_t V = lm.vocab_size();
  for (const char* key : {"peft_logits", "merged_logits"}) {
    const auto& want = expected[key];
    double diff = 0, scale = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t v = 0; v < V; ++v) {
          const double w = want[b][s][v].get<double>();
          diff = std::max(diff, std::abs(logits.data<float>()[(s * B + b) * V + v] - w));
          scale = std::max(scale, std::abs(w));
        }
    EXPECT_LT(diff, 1e-5 * scale) << key << ": max |logit| " << scale;
  }
  EXPECT_GT(expected["max_abs_lora_minus_base"].get<double>(), 0.1);  // the adapters matter

  const std::string base = (dir_ / "base").string(), adapter = (dir_ / "adapter").string();
  models::HfExportOptions e;
  e.native_dir = (fixture / "lora").string();
  e.hf_dir = base;
  e.merge_lora = false;
  models::export_hf_checkpoint(e);
  models::PeftExportOptions p;
  p.native_dir = e.native_dir;
  p.out_dir = adapter;
  const models::PeftExportResult r = models::export_peft_adapter(p);
  EXPECT_EQ(r.rank, 4);
  EXPECT_EQ(r.target_modules.size(), 7u);
  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(fs::path(adapter) / "adapter_model.safetensors"),
            bytes(fixture / "adapter/adapter_model.safetensors"));
  EXPECT_EQ(bytes(fs::path(base) / "model.safetensors"), bytes(fixture / "base/model.safetensors"));
  auto config = nlohmann::json::parse(bytes(fs::path(adapter) / "adapter_config.json"));
  auto want_config = nlohmann::json::parse(bytes(fixture / "adapter/adapter_config.json"));
  config.erase("base_model_name_or_path");
  want_config.erase("base_model_name_or_path");
  EXPECT_EQ(config, want_config);
}

}  // namespace
}  // namespace megatron
