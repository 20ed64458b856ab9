// inference::CausalLM on CUDA (generate --device cuda): Hugging Face fixtures imported for one
// rank (GPT-2: learned positions and LayerNorm; Mistral: sliding window and GQA; a trained
// LLaMA) give the same greedy tokens on the GPU as on the CPU, through the KV cache and by full
// recompute, and their logits (a full forward, then a cached prefill and decode step) agree
// within 1e-4 norm-relative; a tiny model of GPT-OSS's blocks (learned attention sinks, biases,
// alternating windows, clamped quick-GELU experts), trained a few steps here, decodes alike.
// These are SKIPPED without a usable GPU. Asking for CUDA where
// there is none is an InputError that says so (that part runs here).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "megatron/core/device_memory.h"
#include "megatron/inference/causal_lm.h"
#include "megatron/inference/generate.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/trainer.h"
#include "models/hf_checkpoint.h"
#include "tests/support/rel_error.h"
#include "tests/support/test_paths.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf";

class CudaInference : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("megatron_cuda_inference_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The fixture imported as a native checkpoint for one rank.
  std::string import(const std::string& name) {
    models::HfImportOptions o;
    o.hf_dir = (kFixtures / name).string();
    o.out_dir = (dir_ / name).string();
    o.tp = 1;
    models::import_hf_checkpoint(o);
    return o.out_dir;
  }
  fs::path dir_;
};

Tensor column(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size()), 1}, DType::I32);
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

std::vector<float> values(const Tensor& t) {
  EXPECT_EQ(t.device(), Device::CPU);  // CausalLM returns host logits on every device
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST_F(CudaInference, AskingForCudaWithoutAGpuIsAClearError) {
  if (device_available(Device::CUDA)) GTEST_SKIP() << "a GPU is visible: no error to check";
  const std::string ckpt = import("gpt2");
  auto tp = parallel::make_single_process_communicator();
  try {
    const inference::CausalLM lm(ckpt, std::nullopt, *tp, 8, Device::CUDA);
    FAIL() << "built a CUDA model without a GPU";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("inference on cuda: no CUDA device is visible"));
  }
}

TEST_F(CudaInference, GreedyGenerationOnTheGpuMatchesTheCpu) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no usable CUDA device (or no CUDA build)";
  auto tp = parallel::make_single_process_communicator();
  for (const std::string name : {"gpt2", "mistral_sliding", "trained_llama"}) {
    SCOPED_TRACE(name);
    const std::string ckpt = import(name);
    const auto expected = nlohmann::json::parse(std::ifstream(kFixtures / name / "expected.json"));
    const auto prompt = expected["greedy_prompt"].get<std::vector<int32_t>>();
    const auto greedy = expected["greedy"].get<std::vector<int32_t>>();
    const int64_t length = static_cast<int64_t>(prompt.size() + greedy.size());
    const inference::CausalLM cpu(ckpt, std::nullopt, *tp, length);
    const inference::CausalLM gpu(ckpt, std::nullopt, *tp, length, Device::CUDA);
    ASSERT_EQ(gpu.device(), Device::CUDA);

    // A full forward over prompt + greedy, then the same tokens as a cached prefill + one step.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
    EXPECT_LE(megatron::testing::rel_error(values(gpu.forward(column(seq)).logits),
                                           values(cpu.forward(column(seq)).logits)),
              1e-4);
    KvCache cc = cpu.make_cache(), gc = gpu.make_cache();
    for (const std::vector<int32_t>& chunk :
         {std::vector<int32_t>(seq.begin(), seq.end() - 1), std::vector<int32_t>{seq.back()}}) {
      const auto a = gpu.forward(column(chunk), Tensor(), &gc);
      const auto b = cpu.forward(column(chunk), Tensor(), &cc);
      EXPECT_LE(megatron::testing::rel_error(values(a.logits), values(b.logits)), 1e-4);
    }
    EXPECT_EQ(gc.keys[0].device(), Device::CUDA);  // the caches stay on the device
    EXPECT_EQ(gc.length, cc.length);

    inference::SamplingOptions o;
    o.max_new_tokens = static_cast<int64_t>(greedy.size());
    const auto on_cpu = inference::generate(cpu, prompt, o);
    const auto on_gpu = inference::generate(gpu, prompt, o);
    EXPECT_EQ(on_gpu.tokens, on_cpu.tokens);
    EXPECT_EQ(on_gpu.tokens, greedy);  // transformers' own greedy tokens
    o.use_cache = false;
    EXPECT_EQ(inference::generate(gpu, prompt, o).tokens, on_cpu.tokens);
  }
}

// GPT-OSS's blocks, trained 3 steps on the CPU (so the sinks and biases are not their
// initial values) and saved; the GPU decodes the checkpoint as the CPU does.
TEST_F(CudaInference, GptOssBlocksDecodeOnTheGpuAsOnTheCpu) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no usable CUDA device (or no CUDA build)";
  const std::string ckpt = (dir_ / "gpt_oss").string();
  const std::string recipe =
      "model: {arch: llama, num_layers: 2, hidden_size: 64, num_attention_heads: 4,"
      " num_query_groups: 2, seq_length: 32, vocab_size: 96, make_vocab_size_divisible_by: 32,"
      " normalization: rmsnorm, position_embedding: rope, tie_embeddings: false,"
      " activation: quick_geglu, glu_linear_offset: 1.0, activation_func_clamp_value: 7.0,"
      " add_bias: true, add_qkv_bias: true, softmax_type: learnable, window_size: [7, 0],"
      " window_attn_skip_freq: 2, num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 48}\n"
      "training: {device: cpu, micro_batch_size: 2, global_batch_size: 2, train_iters: 3,"
      " eval_interval: 0, eval_iters: 0, seed: 7, peak_tflops: 1.0}\n"
      "optimizer: {lr: 0.01, schedule: {warmup_iters: 1}}\n"
      "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: 96}}\n"
      "checkpoint: {save: " +
      ckpt + ", save_interval: 3}\nlogging: {interval: 100}\n";
  auto tp = parallel::make_single_process_communicator();
  {
    std::ostringstream log;
    training::Trainer t(config::parse_recipe_string(recipe, "gpt_oss_decode.yaml"), 96,
                        std::make_shared<training::MockTokenSource>(32, 96, 5), nullptr, *tp, log);
    (void)t.run();
  }
  const std::vector<int32_t> prompt = {3, 17, 42, 8, 8, 61, 5, 90, 12, 33, 7};
  const int64_t steps = 12, length = static_cast<int64_t>(prompt.size()) + steps;
  const inference::CausalLM cpu(ckpt, std::nullopt, *tp, length);
  const inference::CausalLM gpu(ckpt, std::nullopt, *tp, length, Device::CUDA);
  EXPECT_LE(megatron::testing::rel_error(values(gpu.forward(column(prompt)).logits),
                                         values(cpu.forward(column(prompt)).logits)),
            1e-4);
  KvCache cc = cpu.make_cache(), gc = gpu.make_cache();
  for (const std::vector<int32_t>& chunk :
       {std::vector<int32_t>(prompt.begin(), prompt.end() - 1), std::vector<int32_t>{9}}) {
    const auto a = gpu.forward(column(chunk), Tensor(), &gc);
    const auto b = cpu.forward(column(chunk), Tensor(), &cc);
    EXPECT_LE(megatron::testing::rel_error(values(a.logits), values(b.logits)), 1e-4);
  }
  inference::SamplingOptions o;
  o.max_new_tokens = steps;  // past the window of 7: the cache's window and sinks both matter
  EXPECT_EQ(inference::generate(gpu, prompt, o).tokens, inference::generate(cpu, prompt, o).tokens);
}

}  // namespace
