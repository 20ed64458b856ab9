// End to end through pretrain and generate with the shipped fine-tuning recipe
// (recipes/llama_tiny_sft.yaml, shrunk): a base run saves, the SFT run starts from it through
// checkpoint.pretrained, trains on the shipped instruction set with validation on its held-out
// file, and a restart resumes the SFT run's own checkpoint; generate --prompts-file evaluates
// held-out answers; inspect_data shows the loss mask of a chat template; bad data.sft input is
// an error naming the file and line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/support/test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = megatron::testing::CommandResult;
Result run(const std::string& command) { return megatron::testing::run_command(command); }

const std::string kBin = std::string(MEGATRON_BINARY_DIR) + "/bin/";
const std::string kSource = std::string(MEGATRON_SOURCE_DIR);

class SftCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megatron_sft_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The shipped recipe at a size that trains in seconds.
  std::string sft(const std::string& extra) const {
    return kBin + "pretrain --recipe " + kSource +
           "/recipes/llama_tiny_sft.yaml --set model.num_layers=1 --set model.hidden_size=64 "
           "--set model.ffn_hidden_size=128 --set model.seq_length=128 "
           "--set training.eval_interval=2 --set training.eval_iters=1 --set logging.interval=1 "
           "--set logging.jsonl=null --set optimizer.schedule.warmup_iters=1 " +
           extra;
  }
  fs::path dir_;
};

TEST_F(SftCli, PretrainedThenFineTuneThenRestartThenEvaluate) {
  const std::string base = (dir_ / "base").string(), tuned = (dir_ / "tuned").string();
  // The base model: the SFT recipe with data.sft replaced by the corpus-free mock data.
  Result r =
      run(sft("--set data.sft=null --set data.mock=true --set training.train_iters=2 "
              "--set checkpoint.pretrained=null --set checkpoint.load=null "
              "--set checkpoint.save=" +
              base));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = "--set checkpoint.pretrained=" + base +
                           " --set checkpoint.save=" + tuned + " --set checkpoint.load=" + tuned;
  r = run(sft("--set training.train_iters=2 " + ckpt));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("book_id_train.jsonl"));
  EXPECT_THAT(r.output, HasSubstr("book_id_valid.jsonl"));
  EXPECT_THAT(r.output, HasSubstr("packed"));
  EXPECT_THAT(r.output, HasSubstr("(weights only)"));
  EXPECT_THAT(r.output, HasSubstr("validation at iter 2"));
  r = run(sft("--set training.train_iters=4 " + ckpt));  // the restart
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("loaded checkpoint " + tuned + "/iter_0000002"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("(weights only)")));
  EXPECT_THAT(r.output, HasSubstr("iter      4/4"));

  // Three held-out questions.
  const std::string prompts = (dir_ / "three.jsonl").string();
  {
    std::ifstream in(kSource + "/data/finetune/book_id_valid.jsonl");
    std::ofstream out(prompts);
    std::string line;
    for (int k = 0; k < 3 && std::getline(in, line); ++k) out << line << "\n";
  }
  r = run(kBin + "generate --checkpoint " + tuned + " --prompts-file " + prompts +
          " --max-new-tokens 4 --show 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("expected: "));
  EXPECT_THAT(r.output, HasSubstr("exact match: "));
  EXPECT_THAT(r.output, HasSubstr(" of 3 ("));
}

TEST_F(SftCli, InspectDataShowsTheMaskAndBadInputIsNamed) {
  Result r = run(kBin + "inspect_data --dataset-type sft --data-path " + kSource +
                 "/data/finetune/example_sft.jsonl --tokenizer-type SentencePieceTokenizer "
                 "--tokenizer-model " +
                 kSource +
                 "/tokenizers/corpus_spm_8k.model --chat-template plain --sample 0 "
                 "--seq-length 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("loss mask"));
  EXPECT_THAT(r.output, HasSubstr("[["));  // the untrained prompt is bracketed
  r = run(kBin + "inspect_data --dataset-type sft --data-path " + kSource +
          "/data/finetune/example_sft.jsonl --tokenizer-type SentencePieceTokenizer "
          "--tokenizer-model " +
          kSource + "/tokenizers/corpus_spm_8k.model --chat-template chatml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("example_sft.jsonl:1"));
  EXPECT_THAT(r.output, HasSubstr("<|im_start|>"));

  const std::string bad = (dir_ / "bad.jsonl").string();
  std::ofstream(bad) << "{\"prompt\": \"q\", \"response\": \"a\"}\n{\"prompt\": 3}\n";
  r =
      run(sft("--set training.train_iters=1 --set checkpoint.pretrained=null "
              "--set checkpoint.save=null --set checkpoint.load=null --set data.sft.train=" +
              bad));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bad.jsonl:2"));
  r = run(sft("--set data.sft.chat_template=vicuna"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data.sft.chat_template"));
  r = run(sft("--set data.train=data/cache/corpus_text_document"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data.sft.train: replaces data.train"));
}

// LoRA SFT of a Gemma 3 model straight from a Hugging Face directory (recipes/
// gemma3_tiny_lora.yaml with trained_gemma3, a gemma3_tiny variant exported with its tokenizer):
// the base is converted at start and frozen, the adapters train and are saved, the loss falls.
TEST_F(SftCli, LoraFromAHuggingFaceGemma3Directory) {
  const std::string hf = kSource + "/tests/fixtures/hf/trained_gemma3";
  const std::string save = (dir_ / "lora").string(), log = (dir_ / "lora.jsonl").string();
  const Result r = run(kBin + "pretrain --recipe " + kSource +
                       "/recipes/gemma3_tiny_lora.yaml --set model.num_layers=3 "
                       "--set model.hidden_size=32 --set model.num_attention_heads=4 "
                       "--set model.num_query_groups=2 --set model.ffn_hidden_size=48 "
                       "--set \"model.window_size=[5, 0]\" --set model.window_attn_skip_freq=3 "
                       "--set training.train_iters=12 "
                       "--set training.eval_interval=0 --set logging.interval=1 "
                       "--set optimizer.lr=0.01 --set checkpoint.pretrained=" +
                       hf + " --set data.tokenizer.model=" + hf + " --set checkpoint.save=" + save +
                       " --set logging.jsonl=" + log);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("converting the Hugging Face checkpoint"));
  EXPECT_THAT(r.output, HasSubstr("lora"));
  std::vector<double> losses;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line))
    if (line.find("\"loss\"") != std::string::npos)
      losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_TRUE(fs::exists(fs::path(save) / "iter_0000012"));
}

}  // namespace

// The reliability report's repro: 60 conversations of 400-word prompts with short answers and
// 12 short ones, sequence 256, global batch 8. Conversations whose answers truncation cuts away
// are dropped at start with a message naming the file and how many (the run used to stop at a
// data-dependent iteration, and at the same one after every restart); left truncation keeps
// them; a file with nothing to train on is an error at start naming it.
TEST_F(SftCli, ConversationsWithoutATrainedTokenAreDroppedNotFatal) {
  std::string words;
  for (int w = 0; w < 400; ++w) words += (w % 7 == 0 ? "Elizabeth " : "walked ");
  const std::string long_file = (dir_ / "long_only.jsonl").string();
  const std::string mixed_file = (dir_ / "mixed.jsonl").string();
  {
    std::ofstream all(long_file), mixed(mixed_file);
    for (int k = 0; k < 60; ++k) {
      const std::string line = "{\"prompt\": \"" + words + std::to_string(k) +
                               "\", \"response\": \"Pride and Prejudice.\"}\n";
      all << line;
      mixed << line;
    }
    for (int k = 0; k < 12; ++k)
      mixed << "{\"prompt\": \"Which book, " << k << "?\", \"response\": \"Emma.\"}\n";
  }
  const std::string run_args =
      "--set checkpoint.pretrained=null --set checkpoint.load=null --set checkpoint.save=null "
      "--set model.seq_length=256 --set training.micro_batch_size=4 "
      "--set training.global_batch_size=8 --set training.train_iters=6 "
      "--set training.eval_iters=0 --set training.eval_interval=0 --set data.sft.valid=[] "
      "--set data.split=1 --set data.sft.train=";
  Result r = run(sft(run_args + mixed_file));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("mixed.jsonl"));
  EXPECT_THAT(r.output, HasSubstr("60 of 72 conversations have no trained (assistant) token"));
  EXPECT_THAT(r.output, HasSubstr("iter      6/6"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("zero-gradient step")));

  r = run(sft(run_args + mixed_file + " --set data.sft.truncation=left"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("truncated on the left"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("have no trained")));

  r = run(sft(run_args + long_file));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("long_only.jsonl"));
  EXPECT_THAT(r.output, HasSubstr("none of its 60 conversations has a trained"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("iter      1/6")));
}
