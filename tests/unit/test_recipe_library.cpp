// Every shipped recipe (recipes/*.yaml) loads and validates, and trains one real step on the CPU
// at reduced width and depth with its own architecture and training choices (norm, activation,
// positions, GQA, tying, biases, dropout, precision, recompute, optimizer): no shipped recipe is
// broken. Planning each full-size recipe for its cluster is tests/unit/test_planner.cpp's
// PlannerRecipes.FullSizeRecipesFitTheirCluster.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/trainer.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

std::vector<std::string> shipped_recipes() {
  std::vector<std::string> paths;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MEGATRON_SOURCE_DIR) + "/recipes"))
    if (e.path().extension() == ".yaml") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string name_of(const std::string& path) { return std::filesystem::path(path).stem(); }

constexpr int64_t kVocab = 1000;

// The recipe at toy size: 2 layers of width 64, 4 heads (2 key/value groups when the recipe
// uses grouped-query attention), the recipe's FFN ratio, sequence 32, one process on the CPU,
// nothing written to disk. Everything else is the recipe's own.
config::Recipe reduced(config::Recipe r) {
  auto& m = r.model;
  // Widths to hidden 64 in their proportions (an MoE's experts and shared expert too).
  auto scaled = [&](int64_t width) {
    const double ratio = static_cast<double>(width) / static_cast<double>(m.hidden_size);
    return std::max<int64_t>(8, std::llround(64 * ratio / 8) * 8);
  };
  if (m.moe.moe_ffn_hidden_size > 0) m.moe.moe_ffn_hidden_size = scaled(m.moe.moe_ffn_hidden_size);
  if (m.moe.moe_shared_expert_intermediate_size > 0)
    m.moe.moe_shared_expert_intermediate_size = scaled(m.moe.moe_shared_expert_intermediate_size);
  const double ffn_ratio = static_cast<double>(m.ffn()) / static_cast<double>(m.hidden_size);
  const bool gqa = m.query_groups() < m.num_attention_heads;
  m.num_layers = 2;
  auto& pattern = m.moe.moe_layer_freq.pattern;
  if (!pattern.empty()) {
    pattern.resize(2);
    pattern[1] = 1;  // (DeepSeek-V3's first three layers are dense: keep an MoE layer)
  }
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = gqa ? 2 : 0;
  m.ffn_hidden_size = std::max<int64_t>(8, std::llround(64 * ffn_ratio / 8) * 8);
  m.seq_length = 32;
  m.max_position_embeddings = 0;
  m.vocab_size = kVocab;
  if (r.data.tokenizer.type == config::TokenizerType::Null) r.data.tokenizer.vocab_size = kVocab;
  r.parallel = config::ParallelConfig{};
  auto& t = r.training;
  t.device = config::TrainingDevice::CPU;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = 1;
  t.eval_interval = 0;
  t.eval_iters = 0;
  t.peak_tflops = 1;
  t.threads = 1;
  r.optimizer.schedule.warmup_iters = 0;
  r.optimizer.schedule.decay_iters.reset();
  r.checkpoint = config::CheckpointConfig{};
  r.logging = config::LoggingConfig{};
  r.data.mock = true;
  r.data.sft = {};  // fine-tuning recipes train on their model and parallel choices here
  r.validate();
  return r;
}

class RecipeLibrary : public ::testing::TestWithParam<std::string> {};

TEST_P(RecipeLibrary, LoadsValidatesAndTrainsOneReducedStep) {
  const config::Recipe full = config::load_recipe(GetParam());
  EXPECT_GT(full.model.num_layers, 0);
  const config::Recipe r = reduced(full);
  const bool bert = r.model.arch == config::Arch::BERT;
  std::shared_ptr<const training::BatchSource> source;
  if (bert)
    source = std::make_shared<training::MockBertSource>(r.model.seq_length, kVocab, 7,
                                                        r.data.bert_binary_head);
  else
    source = std::make_shared<training::MockTokenSource>(r.model.seq_length, kVocab, 7);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer trainer(r, kVocab, source, nullptr, *world, log);
  const training::StepMetrics m = trainer.train_step(1);
  // Fresh weights predict close to uniformly over the vocabulary (and the two NSP classes).
  EXPECT_TRUE(std::isfinite(m.loss));
  EXPECT_NEAR(m.lm_loss, std::log(static_cast<double>(kVocab)), 0.5) << log.str();
  EXPECT_EQ(m.has_aux, bert && r.data.bert_binary_head);
  if (m.has_aux) {
    EXPECT_NEAR(m.aux_loss, std::log(2.0), 0.3);
  }
  EXPECT_TRUE(std::isfinite(m.grad_norm));
  EXPECT_GT(m.grad_norm, 0.0);
  EXPECT_FALSE(m.skipped);
}

INSTANTIATE_TEST_SUITE_P(Shipped, RecipeLibrary, ::testing::ValuesIn(shipped_recipes()),
                         [](const auto& info) {
                           std::string n = name_of(info.param);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// model.num_experts builds routed expert layers (a router and one MLP per expert), never the
// dense MLP in their place.
TEST(RecipeLibraryList, MixtureOfExpertsBuildsExpertLayersNotADenseModel) {
  config::Recipe r =
      reduced(config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/gpt_tiny.yaml"));
  r.model.moe.num_experts = 4;
  auto source = std::make_shared<training::MockTokenSource>(r.model.seq_length, kVocab, 7);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer trainer(r, kVocab, source, nullptr, *world, log);
  std::set<std::string> names;
  for (const Parameter* p : trainer.params().params()) names.insert(p->name);
  EXPECT_TRUE(names.count("layers.0.mlp.router.weight"));
  EXPECT_TRUE(names.count("layers.0.mlp.experts.3.fc1.weight"));
  EXPECT_TRUE(names.count("layers.0.mlp.experts.3.fc2.weight"));
  EXPECT_FALSE(names.count("layers.0.mlp.fc1.weight"));
  EXPECT_TRUE(trainer.train_step(1).has_moe);
}

TEST(RecipeLibraryList, ShipsEveryArchitectureAndSize) {
  std::vector<std::string> names;
  for (const auto& p : shipped_recipes()) names.push_back(name_of(p));
  for (const char* expected :
       {"gpt_tiny", "llama_tiny", "bert_tiny", "gpt2_124m", "gpt_1.3b", "gpt_13b", "gpt_175b",
        "llama2_7b", "llama2_13b", "llama2_70b", "llama3_8b", "llama3_70b", "bert_base",
        "bert_large", "mixtral_tiny", "mixtral_8x7b", "deepseek_moe_16b"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

}  // namespace
}  // namespace megatron
