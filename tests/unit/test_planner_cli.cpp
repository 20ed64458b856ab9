// The planner's command line (megatron/planning/planner.h): memory sizes, flag parsing and its
// errors, run_plan_cli's text, JSON and search output and exit codes, and the plan binary itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "megatron/core/error.h"
#include "megatron/planning/planner.h"
#include "tests/support/test_paths.h"
#include "tools/plan_cli.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

TEST(PlannerCli, MemorySizes) {
  EXPECT_EQ(planning::parse_memory_size("80GB"), 80e9);
  EXPECT_EQ(planning::parse_memory_size("80"), 80e9);
  EXPECT_EQ(planning::parse_memory_size("80gib"), 80.0 * 1073741824.0);
  EXPECT_EQ(planning::parse_memory_size("1.5TB"), 1.5e12);
  EXPECT_EQ(planning::parse_memory_size("512MiB"), 512.0 * 1048576.0);
  EXPECT_EQ(planning::parse_memory_size(" 40 GB "), 40e9);
  for (const char* bad : {"", "GB", "80XB", "-80GB", "0", "eighty", "80GB80", "nan"})
    EXPECT_THROW(planning::parse_memory_size(bad), InputError) << bad;
}

std::string parse_error(const std::vector<std::string>& args) {
  try {
    planning::parse_plan_args(args);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(PlannerCli, ParsesFlags) {
  const auto a = planning::parse_plan_args({"--recipe",
                                            "r.yaml",
                                            "--nodes",
                                            "4",
                                            "--gpus-per-node=8",
                                            "--gpu-memory",
                                            "80GiB",
                                            "--gpu-tflops",
                                            "989",
                                            "--search",
                                            "--top",
                                            "3",
                                            "--json",
                                            "--set",
                                            "training.seed=2",
                                            "--vocab",
                                            "50257",
                                            "--no-flash-attention",
                                            "--efficiency",
                                            "0.5"});
  EXPECT_EQ(a.recipe, "r.yaml");
  EXPECT_EQ(*a.nodes, 4);
  EXPECT_EQ(*a.gpus_per_node, 8);
  EXPECT_EQ(*a.gpu_memory_bytes, 80.0 * 1073741824.0);
  EXPECT_EQ(*a.gpu_tflops, 989);
  EXPECT_TRUE(a.search && a.json);
  EXPECT_FALSE(a.flash_attention);
  EXPECT_EQ(a.top, 3);
  EXPECT_EQ(*a.vocab, 50257);
  EXPECT_EQ(*a.efficiency, 0.5);
  EXPECT_EQ(a.overrides, std::vector<std::string>{"training.seed=2"});
}

TEST(PlannerCli, BadFlagsNameTheFlagAndValue) {
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes", "-2"}), HasSubstr("--nodes: "));
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes", "-2"}), HasSubstr("'-2'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpus-per-node", "eight"}),
              HasSubstr("--gpus-per-node: expected a positive integer, got 'eight'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpu-memory", "80XB"}),
              HasSubstr("--gpu-memory: unknown size unit 'xb' in '80XB'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpu-tflops", "0"}),
              HasSubstr("--gpu-tflops: expected a positive number, got '0'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--top", "0"}), HasSubstr("--top: "));
  EXPECT_THAT(parse_error({"--recipe", "r", "--efficiency", "1.5"}),
              HasSubstr("--efficiency: must be in (0, 1], got '1.5'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes"}), HasSubstr("--nodes: needs a value"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--frobnicate"}),
              HasSubstr("unknown argument '--frobnicate'"));
  EXPECT_THAT(parse_error({"--search=yes", "--recipe", "r"}),
              HasSubstr("--search: takes no value"));
  EXPECT_THAT(parse_error({"--nodes", "2"}), HasSubstr("--recipe: required"));
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = planning::run_plan_cli(args, out, err);
  return {code, out.str(), err.str()};
}

class PlannerCliRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("megatron_planner_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::filesystem::path dir_;
};

constexpr const char* kCudaRecipe =
    "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024}\n"
    "training: {device: cuda, precision: bf16, micro_batch_size: 4, global_batch_size: 64, "
    "train_iters: 10}\n"
    "optimizer: {lr: 0.001}\n"
    "data: {tokenizer: {type: ByteTokenizer}, train: [x]}\n"
    "cluster: {nodes: 1, gpus_per_node: 8, gpu_memory_gb: 80, gpu_tflops: 989}\n";

TEST_F(PlannerCliRun, TextJsonAndSearch) {
  const std::string recipe = write("r.yaml", kCudaRecipe);
  const CliResult text = cli({"--recipe", recipe});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("memory per device"));
  EXPECT_THAT(text.out, HasSubstr("fits in 80.0 GB"));
  EXPECT_THAT(text.out, HasSubstr("1 node(s) x 8 devices"));
  EXPECT_THAT(text.out, HasSubstr("MFU"));

  const CliResult js = cli({"--recipe", recipe, "--json", "--gpu-memory", "40GB"});
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["cluster"]["gpu_memory_bytes"], 40e9);
  EXPECT_EQ(j["layout"]["dp"], 8);
  EXPECT_EQ(j["padded_vocab"], 384);  // ByteTokenizer 257 padded to 128
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["memory"]["total"].get<double>(), 0);

  const CliResult small = cli({"--recipe", recipe, "--gpu-memory", "1GB"});
  EXPECT_EQ(small.code, 3);
  EXPECT_THAT(small.out, HasSubstr("DOES NOT FIT"));

  const CliResult s = cli({"--recipe", recipe, "--search", "--top", "4", "--json", "--nodes", "2"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto sj = nlohmann::json::parse(s.out);
  EXPECT_EQ(sj["plan"]["cluster"]["world"], 16);
  EXPECT_EQ(sj["search"]["results"].size(), 4u);
  EXPECT_LE(sj["search"]["results"][0]["time"]["step_s"].get<double>(),
            sj["search"]["results"][3]["time"]["step_s"].get<double>());
  const CliResult st = cli({"--recipe", recipe, "--search"});
  EXPECT_EQ(st.code, 0);
  EXPECT_THAT(st.out, HasSubstr("by estimated step time"));
  EXPECT_THAT(st.out, HasSubstr("sharding"));
}

// The data-parallel sharding strategy, hybrid sharding and optimizer offload in the text and
// JSON reports; the help names the strategies the search ranks.
TEST_F(PlannerCliRun, ShardingOffloadAndHybrid) {
  const std::string recipe = write("r.yaml", kCudaRecipe);
  const CliResult plain = cli({"--recipe", recipe, "--json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto p = nlohmann::json::parse(plain.out);
  EXPECT_EQ(p["layout"]["sharding_strategy"], "no_shard");
  EXPECT_EQ(p["layout"]["instances"], 1);
  EXPECT_EQ(p["layout"]["offload_fraction"], 0.0);
  EXPECT_EQ(p["memory"]["host_offloaded"], 0.0);
  EXPECT_GT(p["time"]["dp_bytes_per_step"].get<double>(), 0);  // dp 8: the gradient all-reduce
  for (const char* s : {"no_shard", "optim", "optim_grads", "optim_grads_params"})
    EXPECT_TRUE(p["memory"]["total_by_strategy"].contains(s)) << s;

  const std::vector<std::string> zero3 = {
      "--recipe", recipe,
      "--set",    "parallel.data_parallel_sharding_strategy=optim_grads_params",
      "--set",    "parallel.num_distributed_optimizer_instances=2",
      "--set",    "optimizer.offload=cpu",
      "--set",    "optimizer.offload_fraction=0.5"};
  const CliResult text = cli(zero3);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("sharding=optim_grads_params instances=2 offload=0.5"));
  EXPECT_THAT(text.out, HasSubstr("data-parallel sharding: optim_grads_params over 4 rank(s) x 2 "
                                  "instances (hybrid), optimizer offload 50% to host"));
  EXPECT_THAT(text.out, HasSubstr("host memory (optimizer offload)"));
  EXPECT_THAT(text.out, HasSubstr("weights (bf16) (1/4)"));
  std::vector<std::string> as_json = zero3;
  as_json.push_back("--json");
  const CliResult js = cli(as_json);
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["layout"]["sharding_strategy"], "optim_grads_params");
  EXPECT_EQ(j["layout"]["instances"], 2);
  EXPECT_EQ(j["layout"]["shard_group"], 4);
  EXPECT_EQ(j["layout"]["offload_fraction"], 0.5);
  EXPECT_GT(j["memory"]["host_offloaded"].get<double>(), 0);
  EXPECT_GT(j["memory"]["sharding_transient"].get<double>(), 0);
  EXPECT_LT(j["memory"]["total"].get<double>(), p["memory"]["total"].get<double>());
  EXPECT_GT(j["time"]["dp_bytes_per_step"].get<double>(),
            p["time"]["dp_bytes_per_step"].get<double>());
  const CliResult help = cli({"--help"});
  EXPECT_THAT(help.out, HasSubstr("optim_grads_params"));
  EXPECT_THAT(help.out, ::testing::Not(HasSubstr("distributed\noptimizer")));
}

TEST_F(PlannerCliRun, Errors) {
  const std::string recipe = write("r.yaml", kCudaRecipe);
  CliResult r = cli({"--recipe", (dir_ / "missing.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.yaml"));
  r = cli({"--recipe", recipe, "--nodes", "zero"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--nodes: expected a positive integer, got 'zero'"));
  // pp 8 does not divide a world of 4.
  r = cli({"--recipe", recipe, "--set", "parallel.pipeline=8", "--gpus-per-node", "4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("parallel.tensor * parallel.pipeline"));
  // Tokenizer files missing and no --vocab: a clear message.
  r = cli({"--recipe", recipe, "--set", "data.tokenizer.type=GPT2BPETokenizer", "--set",
           "data.tokenizer.vocab_file=/nonexistent/v.json", "--set",
           "data.tokenizer.merge_file=/nonexistent/m.txt"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("pass --vocab N"));
  r = cli({"--recipe", recipe, "--set", "data.tokenizer.type=GPT2BPETokenizer", "--set",
           "data.tokenizer.vocab_file=/nonexistent/v.json", "--set",
           "data.tokenizer.merge_file=/nonexistent/m.txt", "--vocab", "50257"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("vocab 50257 padded to 50304"));
  EXPECT_EQ(cli({"--help"}).code, 0);
}

// The binary itself (built with the tools): exit codes and where messages go.
TEST_F(PlannerCliRun, Binary) {
  const std::string bin = std::string(MEGATRON_BINARY_DIR) + "/bin/plan";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " not built";
  const std::string recipe = write("r.yaml", kCudaRecipe);
  auto run = [&](const std::string& args) {
    const std::string cmd = bin + " " + args + " > " + (dir_ / "out.txt").string() + " 2> " +
                            (dir_ / "err.txt").string();
    const int status = std::system(cmd.c_str());
    std::ifstream out(dir_ / "out.txt"), err(dir_ / "err.txt");
    std::stringstream o, e;
    o << out.rdbuf();
    e << err.rdbuf();
    return std::tuple{WIFEXITED(status) ? WEXITSTATUS(status) : -1, o.str(), e.str()};
  };
  auto [ok, ok_out, ok_err] = run("--recipe " + recipe + " --json");
  EXPECT_EQ(ok, 0) << ok_err;
  EXPECT_TRUE(nlohmann::json::parse(ok_out)["fits"].get<bool>());
  auto [bad, bad_out, bad_err] = run("--recipe " + recipe + " --gpu-memory 80XB");
  EXPECT_EQ(bad, 1);
  EXPECT_THAT(bad_err, HasSubstr("--gpu-memory: unknown size unit 'xb' in '80XB'"));
  EXPECT_TRUE(bad_out.empty());
  auto [big, big_out, big_err] = run("--recipe " + recipe + " --gpu-memory 2GB");
  EXPECT_EQ(big, 3) << big_err;
  EXPECT_THAT(big_out, HasSubstr("DOES NOT FIT"));
}

}  // namespace
}  // namespace megatron
