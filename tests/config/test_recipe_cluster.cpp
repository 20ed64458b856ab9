// The optional `cluster:` section (the cluster shape a recipe assumes; the planner's default):
// parsing, defaults, round trips, and errors naming the file, key and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "megatron/config/recipe.h"
#include "tests/config/recipe_test_util.h"

namespace megatron::config {
namespace {

using testing::fixture;
using ::testing::HasSubstr;
using testing::input_error;
using testing::ScratchDir;

std::string with_base(const std::string& yaml) {
  return "extends: " + fixture("valid_base.yaml") + "\n" + yaml + "\n";
}

TEST(ClusterSection, AbsentMeansNotStated) {
  Recipe r = load_recipe(fixture("valid_base.yaml"));
  EXPECT_FALSE(r.cluster.specified());
  EXPECT_EQ(r.cluster.nodes, 0);
  EXPECT_EQ(r.cluster.gpus_per_node, 0);
  EXPECT_EQ(r.cluster.gpu_memory_gb, 0);
  EXPECT_EQ(r.cluster.gpu_tflops, 0);
  EXPECT_EQ(r.cluster.intra_node_gbps, 450);
  EXPECT_EQ(r.cluster.inter_node_gbps, 50);
}

TEST(ClusterSection, ParsesEveryKey) {
  ScratchDir dir;
  std::string file = dir.write("c.yaml", with_base("cluster:\n  nodes: 4\n  gpus_per_node: 8\n"
                                                   "  gpu_memory_gb: 80\n  gpu_tflops: 989.5\n"
                                                   "  intra_node_gbps: 300\n"
                                                   "  inter_node_gbps: 25\n"));
  Recipe r = load_recipe(file);
  EXPECT_TRUE(r.cluster.specified());
  EXPECT_EQ(r.cluster.nodes, 4);
  EXPECT_EQ(r.cluster.gpus_per_node, 8);
  EXPECT_EQ(r.cluster.gpu_memory_gb, 80);
  EXPECT_EQ(r.cluster.gpu_tflops, 989.5);
  EXPECT_EQ(r.cluster.intra_node_gbps, 300);
  EXPECT_EQ(r.cluster.inter_node_gbps, 25);
  EXPECT_THAT(r.origins.of("cluster.gpu_tflops"), HasSubstr("c.yaml:"));
}

TEST(ClusterSection, OverridesAndRoundTrips) {
  Recipe r = load_recipe(fixture("valid_base.yaml"),
                         {"cluster.nodes=2", "cluster.gpus_per_node=8", "cluster.gpu_memory_gb=80",
                          "cluster.gpu_tflops=989", "cluster.inter_node_gbps=100"});
  EXPECT_EQ(r.cluster.nodes, 2);
  EXPECT_EQ(r.cluster.inter_node_gbps, 100);
  const std::string yaml = r.to_yaml();
  EXPECT_THAT(yaml, HasSubstr("cluster:\n  nodes: 2\n  gpus_per_node: 8\n"));
  EXPECT_TRUE(parse_recipe_string(yaml, "dump.yaml") == r) << yaml;
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["cluster"]["gpu_tflops"], 989);
  EXPECT_TRUE(parse_recipe_string(j.dump(2), "dump.json") == r) << j.dump(2);
  // Not stated: the defaults round-trip too.
  Recipe plain = load_recipe(fixture("valid_base.yaml"));
  EXPECT_THAT(plain.to_yaml(), HasSubstr("nodes: 0  # not stated"));
  EXPECT_TRUE(parse_recipe_string(plain.to_yaml(), "dump.yaml") == plain);
  // The cluster is part of the recipe's identity.
  EXPECT_FALSE(plain == r);
}

struct BadCluster {
  const char* name;
  const char* yaml;
  const char* key;
  const char* value;
};

void PrintTo(const BadCluster& b, std::ostream* os) { *os << b.name; }

const BadCluster kBad[] = {
    {"nodes_negative", "cluster: {nodes: -1, gpus_per_node: 8}", "cluster.nodes", "got -1"},
    {"gpus_negative", "cluster: {nodes: 1, gpus_per_node: -8}", "cluster.gpus_per_node", "got -8"},
    {"memory_negative", "cluster: {gpu_memory_gb: -80}", "cluster.gpu_memory_gb", "got -80"},
    {"tflops_negative", "cluster: {gpu_tflops: -1}", "cluster.gpu_tflops", "got -1"},
    {"intra_zero", "cluster: {intra_node_gbps: 0}", "cluster.intra_node_gbps", "got 0"},
    {"inter_negative", "cluster: {inter_node_gbps: -5}", "cluster.inter_node_gbps", "got -5"},
    {"nodes_only", "cluster: {nodes: 2}", "cluster.gpus_per_node", "gpus_per_node 0"},
    {"gpus_only", "cluster: {gpus_per_node: 8}", "cluster.nodes", "got nodes 0"},
    {"nodes_word", "cluster: {nodes: many}", "cluster.nodes", "'many'"},
    {"memory_units", "cluster: {gpu_memory_gb: 80GB}", "cluster.gpu_memory_gb", "'80GB'"},
    {"tflops_quoted", "cluster: {gpu_tflops: \"989\"}", "cluster.gpu_tflops", "the string"},
    {"unknown_key", "cluster: {gpus_per_nodes: 8}", "cluster.gpus_per_nodes",
     "did you mean 'gpus_per_node'"},
    {"section_scalar", "cluster: big", "cluster", "'big'"},
};

class ClusterRule : public ::testing::TestWithParam<BadCluster> {};

TEST_P(ClusterRule, ErrorNamesFileKeyAndValue) {
  const BadCluster& b = GetParam();
  ScratchDir dir;
  std::string file = dir.write(std::string(b.name) + ".yaml", with_base(b.yaml));
  std::string msg = input_error([&] { load_recipe(file); });
  EXPECT_THAT(msg, HasSubstr(std::string(b.name) + ".yaml:"));
  EXPECT_THAT(msg, HasSubstr(std::string(": ") + b.key + ": "));
  EXPECT_THAT(msg, HasSubstr(b.value));
}

INSTANTIATE_TEST_SUITE_P(Rules, ClusterRule, ::testing::ValuesIn(kBad),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ClusterSection, UnknownSectionSuggestsCluster) {
  ScratchDir dir;
  std::string file = dir.write("c.yaml", with_base("clustr: {nodes: 1}"));
  EXPECT_THAT(input_error([&] { load_recipe(file); }), HasSubstr("did you mean 'cluster'"));
}

}  // namespace
}  // namespace megatron::config
