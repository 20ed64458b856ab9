#pragma once
// Helpers shared by the planner tests (tests/unit/test_planner*.cpp): a learnable synthetic corpus
// for real training steps, recipes from inline YAML (a gpt_tiny-sized GPT and a LLaMA-style
// model) and a one-device cluster.
#include <cstdint>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/planning/planner.h"
#include "megatron/training/batch_source.h"

namespace megatron::planning::testing {

// A learnable synthetic corpus (as in test_training.cpp) over `vocab` ids.
class CountingSource final : public training::SampleSource {
 public:
  CountingSource(int64_t S, int64_t vocab) : S_(S), vocab_(vocab) {}
  int64_t seq_length() const override { return S_; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= S_; ++t)
      tokens[t] = static_cast<int32_t>((index * 7 + t * 3) % vocab_);
  }

 private:
  int64_t S_, vocab_;
};

inline config::Recipe recipe_from(const std::string& model, const std::string& training,
                                  const std::string& extra = "") {
  const std::string yaml = "model: {" + model + "}\ntraining: {" + training +
                           "}\noptimizer: {lr: 0.001}\n"
                           "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n" +
                           extra;
  return config::parse_recipe_string(yaml, "planner_test.yaml");
}

// gpt_tiny-sized: 4 layers, hidden 256, seq 128, micro 4, vocab 8000 (padded to 8064).
inline config::Recipe gpt_small(const std::string& more_training = "") {
  return recipe_from(
      "num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
      "vocab_size: 8000, hidden_dropout: 0.1, attention_dropout: 0.1",
      "micro_batch_size: 4, global_batch_size: 4, train_iters: 2, peak_tflops: 1.0, seed: 5" +
          more_training);
}

// LLaMA-style: RMSNorm, SwiGLU, RoPE, GQA (8 heads, 2 groups), untied, no biases.
inline config::Recipe llama_small(const std::string& more_training = "") {
  return recipe_from(
      "arch: llama, num_layers: 4, hidden_size: 256, num_attention_heads: 8, "
      "num_query_groups: 2, ffn_hidden_size: 704, seq_length: 128, vocab_size: 6000, "
      "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "tie_embeddings: false, add_bias: false",
      "micro_batch_size: 2, global_batch_size: 4, train_iters: 2, peak_tflops: 1.0, seed: 5" +
          more_training);
}

inline ClusterSpec one_device() {
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 1;
  c.gpu_memory_bytes = 64e9;
  return c;
}

}  // namespace megatron::planning::testing
