// End to end through the real binaries: preprocess the shipped corpus, train the default
// recipe for a few dozen steps and check the loss falls and the JSONL log is complete; bad
// recipes and flags give clear errors and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = megatron::testing::CommandResult;
Result run(const std::string& command) { return megatron::testing::run_command(command); }

const std::string kBin = std::string(MEGATRON_BINARY_DIR) + "/bin/";
const std::string kSrc = MEGATRON_SOURCE_DIR;
const std::string kRecipe = kSrc + "/recipes/gpt_tiny.yaml";

class PretrainE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("megatron_e2e_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const Result r = run(kBin + "preprocess_data --input " + kSrc + "/data/corpus/austen.jsonl " +
                         kSrc + "/data/corpus/kjv.jsonl --tokenizer-type SentencePieceTokenizer" +
                         " --tokenizer-model " + kSrc + "/tokenizers/corpus_spm_8k.model" +
                         " --append-eod --workers 2 --output-prefix " + (dir_ / "corpus").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string data_prefix() { return (dir_ / "corpus_text_document").string(); }
  static fs::path dir_;
};
fs::path PretrainE2E::dir_;

TEST_F(PretrainE2E, DefaultRecipeLearnsAndLogs) {
  const fs::path log = dir_ / "log.jsonl";
  const Result r = run(kBin + "pretrain --recipe " + kRecipe +
                       " --set data.train=" + data_prefix() + " --set training.train_iters=40" +
                       " --set training.eval_interval=20 --set training.eval_iters=2" +
                       " --set optimizer.schedule.warmup_iters=5" +
                       " --set training.peak_tflops=0.1 --set logging.jsonl=" + log.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("# resolved recipe"));
  EXPECT_THAT(r.output, HasSubstr("tok/s"));
  EXPECT_THAT(r.output, HasSubstr("gemm: oneDNN"));

  std::ifstream in(log);
  std::string line;
  int steps = 0, starts = 0;
  std::vector<double> val;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "start") {  // the run's hardware, GEMM path and MFU peak
      ++starts;
      EXPECT_EQ(steps + val.size(), 0u) << "the start record comes first";
      for (const char* key : {"gemm", "cpu", "isa", "peak_flops", "peak_source", "gemm_flops"})
        EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
      EXPECT_EQ(j.value("peak_source", ""), "recipe training.peak_tflops");
      EXPECT_DOUBLE_EQ(j.value("peak_flops", 0.0), 0.1e12);
      EXPECT_THAT(j.value("gemm", ""), HasSubstr("oneDNN"));
      continue;
    }
    if (j.contains("val_loss")) {
      val.push_back(j["val_loss"].get<double>());
      continue;
    }
    for (const char* key :
         {"iteration", "loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    ++steps;
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(steps, 40);
  ASSERT_EQ(val.size(), 3u);                        // step 0, 20, 40
  EXPECT_NEAR(val.front(), std::log(8192.0), 0.3);  // near-uniform at init
  EXPECT_LT(val.back(), 0.8 * val.front()) << r.output;
}

// GPT-OSS's blocks on llama_tiny (attention sinks, model.softmax_type learnable; the clamped
// quick-GELU unit with offset 1; q/k/v biases): the logged loss falls
// and the checkpoint holds the sinks; generate decodes through the KV cache with them (the same
// tokens as decoding without the cache, which recomputes every prefix in full); the exports
// refuse it by name (GPT-OSS's has experts in every layer; Megatron-LM's has no sinks here).
TEST_F(PretrainE2E, AttentionSinksLearnDecodeAndAreNotExportedSilently) {
  const fs::path log = dir_ / "sinks.jsonl", ckpt = dir_ / "sinks_ckpt";
  Result r = run(kBin + "pretrain --recipe " + kSrc + "/recipes/llama_tiny.yaml --set data.train=" +
                 data_prefix() + " --set model.softmax_type=learnable" +
                 " --set model.activation=quick_geglu --set model.glu_linear_offset=1" +
                 " --set model.activation_func_clamp_value=7 --set model.add_qkv_bias=true" +
                 " --set training.train_iters=30 --set training.eval_interval=30" +
                 " --set training.eval_iters=1 --set optimizer.schedule.warmup_iters=3" +
                 " --set checkpoint.save=" + ckpt.string() + " --set checkpoint.save_interval=30" +
                 " --set training.peak_tflops=0.1 --set logging.jsonl=" + log.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(log);
  std::string line;
  std::vector<double> loss;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("lm_loss")) loss.push_back(j["lm_loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  EXPECT_LT(loss.back(), loss.front() - 1.0) << "the loss did not fall";
  r = run(kBin + "checkpoint_info " + ckpt.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("layers.3.attention.softmax_offset"));
  const std::string gen = kBin + "generate --checkpoint " + ckpt.string() +
                          " --prompt-ids 5,17,99,4 --max-new-tokens 8 --print-ids";
  const Result cached = run(gen);
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  const Result full = run(gen + " --no-cache");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto ids = [](const std::string& out) {  // the line of --print-ids
    std::istringstream lines(out);
    std::string l;
    while (std::getline(lines, l))
      if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) return l;
    return std::string("(no ids in: ") + out + ")";
  };
  const std::string generated = ids(cached.output);
  EXPECT_EQ(generated, ids(full.output));
  EXPECT_EQ(std::count(generated.begin(), generated.end(), ' '), 7) << generated;
  // Sinks on a dense MLP: GptOssForCausalLM (the default for sinks) routes every layer, and no
  // other architecture has sinks.
  r = run(kBin + "convert_checkpoint --from " + ckpt.string() + " --to-hf " +
          (dir_ / "sinks_hf").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("GptOssForCausalLM has learned attention sinks"));
  EXPECT_THAT(r.output, HasSubstr("this model is not one"));
  r = run(kBin + "convert_checkpoint --from " + ckpt.string() + " --to-hf " +
          (dir_ / "sinks_llama").string() + " --architecture LlamaForCausalLM");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model.softmax_type learnable (attention sinks) exports as "
                                  "GptOssForCausalLM only (not LlamaForCausalLM)"));
  EXPECT_FALSE(fs::exists(dir_ / "sinks_hf") || fs::exists(dir_ / "sinks_llama"));
  r = run(kBin + "convert_checkpoint --from " + ckpt.string() + " --to-megatron " +
          (dir_ / "sinks_mlm").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model.softmax_type learnable: attention sinks do not export"));
}

TEST(PretrainCli, BadInputsFailWithAClearMessage) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"", "--recipe is required"},
      {"--recipe /nonexistent/x.yaml", "/nonexistent/x.yaml"},
      {"--recipe " + kRecipe + " --bogus", "unknown argument '--bogus'"},
      {"--recipe " + kRecipe + " --set model.num_layers=-2", "model.num_layers"},
      {"--recipe " + kRecipe + " --set model.hidden_size=250", "model.hidden_size"},
      {"--recipe " + kRecipe + " --set model.nonsense=1", "model.nonsense"},
      {"--recipe " + kRecipe + " --set data.train=/nonexistent/prefix", "/nonexistent/prefix"},
      {"--recipe " + kRecipe + " --set training.device=cuda --set data.train=/x", "cuda"},
      // Sized before any index is built (it was a bare std::bad_alloc after 13 s).
      {"--recipe " + kRecipe + " --set training.train_iters=1000000000",
       "training.train_iters 1000000000 x training.global_batch_size 16 (+ training.eval_iters' "
       "validation) = 16000000080 samples: their data index alone needs at least 357.6 GiB"},
      // An elastic restart on a node count outside the range, or one no layout fits.
      {"--recipe " + kRecipe +
           " --set cluster.elastic.min_nodes=2 --set cluster.elastic.max_nodes=4",
       "cluster.elastic: the job runs on 1 node(s), outside [min_nodes 2, max_nodes 4]"},
      {"--recipe " + kRecipe +
           " --set cluster.elastic.min_nodes=1 --set cluster.elastic.max_nodes=2"
           " --set parallel.tensor=2",
       "no layout keeps tp/pp/cp/ep and the global batch on 1 node(s) x 1 ranks; node counts in "
       "[1, 2] that fit: 2"},
  };
  for (const Case& c : cases) {
    const Result r = run(kBin + "pretrain " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.args;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("fatal"))) << c.args;
  }
}

// Under mpirun a bad recipe is reported once and every rank exits cleanly (before: each rank
// printed it and aborted the job: Open MPI's MPI_ABORT banner and its unpack noise).
TEST(PretrainCli, RecipeErrorsUnderMpirunAreReportedOnceWithoutAnAbort) {
  const Result r = run(std::string(MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " + kBin +
                       "pretrain --recipe " + kRecipe + " --set model.num_layers=-1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string message = "model.num_layers: must be > 0 (got -1)";
  const size_t first = r.output.find(message);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(message, first + 1), std::string::npos) << "reported twice:\n"
                                                                  << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
}

TEST(PretrainCli, PrintRecipeShowsResolvedValues) {
  const Result r =
      run(kBin + "pretrain --recipe " + kRecipe + " --set training.train_iters=77 --print-recipe");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("train_iters: 77"));
}

}  // namespace
