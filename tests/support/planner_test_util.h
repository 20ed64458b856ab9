#pragma once
// Helpers shared by the planner tests (tests/unit/test_planner*.cpp): a learnable synthetic corpus
// for real training steps, recipes from inline YAML (a gpt_tiny-sized GPT and a LLaMA-style
// model), a one-device cluster and a communicator of a given shape that never communicates.
#include <cstdint>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/core/error.h"
#include "megatron/parallel/communicator.h"
#include "megatron/planning/planner.h"
#include "megatron/training/batch_source.h"

namespace megatron::planning::testing {

// A communicator that only reports a size and rank: enough to build a tp (or ep) shard of the
// model without other ranks.
class ShapeOnlyComm final : public parallel::Communicator {
 public:
  ShapeOnlyComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int r) const override { return r; }
  void all_reduce(Tensor&, parallel::ReduceOp) override { fail(); }
  std::unique_ptr<parallel::Work> all_reduce_async(Tensor&, parallel::ReduceOp) override { fail(); }
  void all_gather(const Tensor&, Tensor&) override { fail(); }
  std::unique_ptr<parallel::Work> all_gather_async(const Tensor&, Tensor&) override { fail(); }
  void reduce_scatter(const Tensor&, Tensor&, parallel::ReduceOp) override { fail(); }
  std::unique_ptr<parallel::Work> reduce_scatter_async(const Tensor&, Tensor&,
                                                       parallel::ReduceOp) override {
    fail();
  }
  void broadcast(Tensor&, int) override { fail(); }
  void barrier() override { fail(); }
  void all_to_all(const Tensor&, const std::vector<int64_t>&, Tensor&,
                  const std::vector<int64_t>&) override {
    fail();
  }
  std::unique_ptr<parallel::Work> batch_isend_irecv(std::vector<parallel::P2POp>) override {
    fail();
  }

 private:
  [[noreturn]] static void fail() { throw Error("ShapeOnlyComm: no communication"); }
  int rank_, size_;
  std::string name_ = "shape-only";
};

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
