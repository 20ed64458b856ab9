// Elastic restarts (cluster.elastic, megatron/training/elastic.h): the node count is checked
// against the range, a stated data-parallel size follows the world, a world no layout fits is
// refused naming the keys and the node counts that would fit, and a resumed checkpoint of
// another layout is described. (The loss curve across shrink and growth is tested under real
// Slurm: tests/slurm/run_slurm_tests.sh elastic.)
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/core/error.h"
#include "megatron/training/elastic.h"

namespace megatron {
namespace {

config::Recipe recipe(const std::string& parallel, const std::string& elastic) {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
    << " vocab_size: 64}\n"
    << "parallel: {" << parallel << "}\n"
    << "training: {micro_batch_size: 2, global_batch_size: 16, train_iters: 4}\n"
    << "optimizer: {lr: 0.001}\n"
    << "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: 64}}\n"
    << "cluster: {elastic: {" << elastic << "}}\n";
  return config::parse_recipe_string(y.str(), "elastic.yaml");
}

parallel::LaunchInfo launch(int nodes, int ranks_per_node) {
  parallel::LaunchInfo l;
  l.num_nodes = nodes;
  l.world_size = nodes * ranks_per_node;
  l.launcher = "slurm";
  return l;
}

std::string refusal(config::Recipe r, const parallel::LaunchInfo& l) {
  std::ostringstream out;
  try {
    training::fit_recipe_to_world(r, l, out);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Elastic, DataParallelSizeFollowsTheWorld) {
  config::Recipe r = recipe("tensor: 2, data: 4", "min_nodes: 1, max_nodes: 4");
  std::ostringstream out;
  training::fit_recipe_to_world(r, launch(2, 2), out);  // 4 ranks: dp 2, not 4
  EXPECT_EQ(r.parallel.data, 0);
  EXPECT_NE(out.str().find("elastic: parallel.data 4 -> 2 (4 ranks on 2 node(s)"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(r.num_microbatches(4), 4);  // 16 / (2 * 2): the global batch is kept
  EXPECT_EQ(r.num_microbatches(8), 2);
  r.resolve_for_world(4);
  EXPECT_EQ(r.parallel.data, 2);
}

TEST(Elastic, WithoutElasticAStatedSizeStaysAndIsChecked) {
  config::Recipe r = recipe("tensor: 2, data: 4", "");
  std::ostringstream out;
  training::fit_recipe_to_world(r, launch(2, 2), out);
  EXPECT_EQ(r.parallel.data, 4);
  EXPECT_TRUE(out.str().empty());
  EXPECT_THROW(r.resolve_for_world(4), InputError);  // as before: data 4 needs 8 ranks
}

TEST(Elastic, NodeCountOutsideTheRangeIsRefused) {
  const config::Recipe r = recipe("tensor: 1", "min_nodes: 2, max_nodes: 4");
  const std::string e = refusal(r, launch(1, 2));
  EXPECT_NE(
      e.find("cluster.elastic: the job runs on 1 node(s), outside [min_nodes 2, max_nodes 4]"),
      std::string::npos)
      << e;
  EXPECT_NE(refusal(r, launch(5, 2)).find("outside"), std::string::npos);
  EXPECT_EQ(refusal(r, launch(3, 2)).find("outside"), std::string::npos);
}

TEST(Elastic, AWorldNoLayoutFitsNamesTheKeysAndTheNodeCountsThatFit) {
  // Global batch 16 with micro-batch 2: dp must divide 8. At 3 ranks per node, 3 nodes (dp 9)
  // and 1 node (dp 3) do not fit; no count in [1, 3] does.
  const config::Recipe r = recipe("tensor: 1", "min_nodes: 1, max_nodes: 3");
  std::string e = refusal(r, launch(3, 3));
  EXPECT_NE(e.find("training.global_batch_size"), std::string::npos) << e;
  EXPECT_NE(e.find("no layout keeps tp/pp/cp/ep and the global batch on 3 node(s) x 3 ranks"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("node counts in [1, 3] that fit: none"), std::string::npos) << e;
  // tensor 2 at 2 ranks per node: 3 nodes give dp 3 (16 % 6 != 0); 1, 2 and 4 nodes fit.
  const config::Recipe t = recipe("tensor: 2", "min_nodes: 1, max_nodes: 4");
  e = refusal(t, launch(3, 2));
  EXPECT_NE(e.find("node counts in [1, 4] that fit: 1, 2, 4"), std::string::npos) << e;
  // tensor 4 on 3 nodes x 2 ranks: tensor * pipeline * context does not divide the world.
  e = refusal(recipe("tensor: 4", "min_nodes: 1, max_nodes: 4"), launch(3, 2));
  EXPECT_NE(e.find("parallel.tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("that fit: 2, 4"), std::string::npos) << e;
}

TEST(Elastic, RangeIsValidated) {
  EXPECT_THROW(recipe("tensor: 1", "min_nodes: 3, max_nodes: 2"), InputError);
  EXPECT_THROW(recipe("tensor: 1", "min_nodes: 0, max_nodes: 2"), InputError);
  EXPECT_THROW(recipe("tensor: 1", "min_nodes: -1"), InputError);
  try {
    recipe("tensor: 1", "min_nodes: 3, max_nodes: 2");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.elastic.min_nodes"), std::string::npos)
        << e.what();
  }
}

TEST(Elastic, ThePlannerChecksTheDeviceMemoryOfTheNewLayout) {
  const std::string yaml =
      "model: {num_layers: 24, hidden_size: 2048, num_attention_heads: 16, seq_length: 1024,"
      " vocab_size: 32000}\n"
      "training: {micro_batch_size: 1, global_batch_size: 8, train_iters: 4, device: cuda}\n"
      "optimizer: {lr: 0.001}\n"
      "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: 32000}}\n"
      "cluster: {gpu_memory_gb: GB, elastic: {min_nodes: 1, max_nodes: 4}}\n";
  auto with_memory = [&](const std::string& gb) {
    std::string y = yaml;
    y.replace(y.find("GB"), 2, gb);
    config::Recipe r = config::parse_recipe_string(y, "elastic.yaml");
    r.resolve_for_world(2);
    return r;
  };
  // About 1.3B parameters unsharded: some 20 GB of weights, gradients and Adam state per GPU.
  try {
    training::check_elastic_device_fit(with_memory("8"), launch(1, 2), 32000);
    FAIL() << "a layout over the device memory was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.elastic: on 1 node(s) (data parallel 2) the "
                                         "planner estimates"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("more than cluster.gpu_memory_gb 8 GB"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(training::check_elastic_device_fit(with_memory("1000"), launch(1, 2), 32000));
}

TEST(Elastic, LayoutChangeIsDescribed) {
  const nlohmann::json saved = {{"tp", 1}, {"pp", 1}, {"dp", 4}};
  EXPECT_EQ(training::describe_layout_change(saved, {1, 1, 4, 8, 2}), "");
  EXPECT_EQ(training::describe_layout_change(saved, {1, 1, 2, 8, 2}),
            "resharded resume: the checkpoint was saved by tp 1 pp 1 dp 4 (1 micro-batch(es) per "
            "step), this run is tp 1 pp 1 dp 2 (2 micro-batch(es) per step); global batch 8 kept, "
            "optimizer state resharded");
  EXPECT_EQ(training::describe_layout_change(nlohmann::json::object(), {1, 1, 2, 8, 2}), "");
}

}  // namespace
}  // namespace megatron
