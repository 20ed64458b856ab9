// End to end through convert_checkpoint and generate: a Hugging Face LLaMA with its own
// tokenizer (tests/fixtures/hf/llama_with_tokenizer, made by transformers) imported, generated
// from with a text prompt (transformers' greedy tokens, on one process and on two tensor-parallel
// ranks, from the import and from the HF directory directly), exported with its tokenizer files;
// usage errors exit 2, bad input exits 1 naming the problem, nothing is overwritten.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "megatron/core/tensor.h"  // Device, device_available
#include "tests/support/run_command.h"
#include "tests/support/test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = megatron::testing::CommandResult;
Result run(const std::string& command) { return megatron::testing::run_command(command); }

const std::string kBin = std::string(MEGATRON_BINARY_DIR) + "/bin/";
const std::string kFixture =
    std::string(MEGATRON_SOURCE_DIR) + "/tests/fixtures/hf/llama_with_tokenizer";

class HfTools : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megatron_hf_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    expected_ = nlohmann::json::parse(std::ifstream(kFixture + "/expected.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string greedy_ids() const {
    std::ostringstream s;
    const char* sep = "";
    for (int id : expected_["greedy"]) s << sep << id, sep = " ";
    return s.str();
  }
  std::string generate_args() const {
    return " --prompt \"" + expected_["prompt"].get<std::string>() + "\" --max-new-tokens 10";
  }
  fs::path dir_;
  nlohmann::json expected_;
};

TEST_F(HfTools, ImportGenerateExportWithTheModelsTokenizer) {
  const std::string ckpt = (dir_ / "ckpt").string();
  Result r = run(kBin + "convert_checkpoint --from-hf " + kFixture + " --to " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("imported"));
  std::ifstream recipe(ckpt + "/recipe.yaml");
  const std::string yaml((std::istreambuf_iterator<char>(recipe)), {});
  EXPECT_THAT(yaml, HasSubstr("type: HuggingFaceTokenizer"));
  // Text in, transformers' greedy tokens out: from the import, and from the HF directory.
  for (const std::string& from : {ckpt, kFixture}) {
    r = run(kBin + "generate --checkpoint " + from + generate_args() + " --print-ids");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(greedy_ids())) << from;
    EXPECT_THAT(r.output, HasSubstr("tokens/s"));
  }
  r = run(kBin + "generate --checkpoint " + ckpt + generate_args());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(expected_["prompt"].get<std::string>() +
                                  expected_["text"].get<std::string>()));
  r = run(std::string(MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " + kBin +
          "generate --checkpoint " + ckpt + generate_args() + " --print-ids");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(greedy_ids()));
  EXPECT_THAT(r.output, HasSubstr("tp 2"));
  // Out again, with the tokenizer files, bf16 as imported.
  const std::string out = (dir_ / "hf").string();
  r = run(kBin + "convert_checkpoint --from " + ckpt + " --to-hf " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bfloat16"));
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  r = run(kBin + "convert_checkpoint --from " + ckpt + " --to-hf " + out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("already exists and is not empty"));
}

TEST_F(HfTools, UsageAndInputErrors) {
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  const std::string gpt2 = std::string(MEGATRON_SOURCE_DIR) + "/tests/fixtures/hf/gpt2";
  const std::string mlm =
      std::string(MEGATRON_SOURCE_DIR) + "/tests/fixtures/megatron/llama_tp2_pp2_torch";
  const std::vector<std::pair<std::string, Case>> cases = {
      {"convert_checkpoint", {"", 2, "give either"}},
      {"convert_checkpoint", {"--from-megatron " + mlm, 2, "--from-megatron and --to go together"}},
      {"convert_checkpoint",
       {"--from-megatron " + mlm + " --from-hf " + gpt2 + " --to z", 2, "two imports"}},
      {"convert_checkpoint",
       {"--from-megatron " + mlm + " --to z --dtype bf16", 2, "--from-megatron takes"}},
      {"convert_checkpoint", {"--from x --to-megatron y --format zarr", 2, "torch_dist or torch"}},
      {"convert_checkpoint",
       {"--from x --to-megatron y --tensor-parallel 2", 2, "lay out --format torch's rank files"}},
      {"convert_checkpoint", {"--from x --to-hf y --format torch", 2, "--to-megatron flags"}},
      {"convert_checkpoint",
       {"--from x --to-megatron y --megatron-layer-spec te", 2, "transformer_engine or local"}},
      {"convert_checkpoint", {"--from x --to-hf y --to-megatron z", 2, "two exports"}},
      {"convert_checkpoint", {"--from x --to-hf y --weights-only", 2, "a --from-megatron flag"}},
      {"convert_checkpoint",
       {"--from-megatron /nonexistent --to z", 1,
        "Megatron-LM checkpoint /nonexistent is not a directory"}},
      {"convert_checkpoint",
       {"--from-megatron " + mlm + " --iteration 7 --to z", 1, "has no iter_0000007 directory"}},
      {"convert_checkpoint", {"--from /nonexistent --to-megatron z", 1, "does not exist"}},
      {"convert_checkpoint", {"--from-hf " + gpt2, 2, "--from-hf and --to go together"}},
      {"convert_checkpoint", {"--from x --to-hf y --tensor-parallel 2", 2, "import flags"}},
      {"convert_checkpoint", {"--from x --to-hf y --dtype fp8", 2, "--dtype must be"}},
      {"convert_checkpoint",
       {"--from x --to-hf y --max-shard-size 99999999999999999999GB", 2, "is too large"}},
      {"convert_checkpoint", {"--from x --to-hf y --max-shard-size 0.1", 2, "not a positive size"}},
      {"convert_checkpoint", {"--from-hf " + gpt2 + " --to z --tensor-parallel 0", 2, ">= 1"}},
      {"convert_checkpoint", {"--from-hf /nonexistent --to z", 1, "does not exist"}},
      {"convert_checkpoint", {"--from /nonexistent --to-hf z", 1, "does not exist"}},
      {"convert_checkpoint",
       {"--from-hf " + gpt2 + " --to " + (dir_ / "t3").string() + " --tensor-parallel 3", 1,
        "config.json with --tensor-parallel 3 --pipeline-parallel 1 --expert-parallel 1: "
        "model.num_attention_heads: must be divisible by parallel.tensor"}},
      {"generate", {"", 2, "--checkpoint is required"}},
      {"generate", {"--checkpoint x --prompt a --prompt-ids 1", 2, "exactly one"}},
      {"generate", {"--checkpoint " + gpt2 + " --prompt-ids 1,x", 2, "is not a token id"}},
      {"generate", {"--checkpoint " + gpt2 + " --prompt-ids 1 --top-p 0", 2, "top_p"}},
      {"generate", {"--checkpoint " + gpt2 + " --prompt-ids 1 --device gpu", 2, "cpu or cuda"}},
      {"generate",
       {"--checkpoint " + gpt2 + " --prompt-ids 1 --tokenizer-type Tiktoken", 2,
        "--tokenizer-type must be one of GPT2BPETokenizer"}},
      {"generate",
       {"--checkpoint " + gpt2 + " --prompt-ids 1,999 --max-new-tokens 2", 1,
        "outside the vocabulary"}},
      {"generate", {"--checkpoint " + gpt2 + " --prompt-ids 1,2", 1, "the model has 32"}},
      {"generate", {"--checkpoint " + gpt2 + " --prompt hello", 1, "--prompt needs a tokenizer"}},
      {"generate", {"--checkpoint /nonexistent --prompt-ids 1", 1, "does not exist"}},
  };
  for (const auto& [tool, c] : cases) {
    const Result r = run(kBin + tool + " " + c.args);
    EXPECT_EQ(r.exit_code, c.code) << tool << " " << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << tool << " " << c.args;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("recipe.yaml:"))) << tool << " " << c.args;
  }
  // Nothing to generate is not an error, and reports no made-up rate.
  const Result none =
      run(kBin + "generate --checkpoint " + gpt2 + " --prompt-ids 1 --max-new-tokens 0");
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no token generated (--max-new-tokens 0)"));
  EXPECT_THAT(none.output, ::testing::Not(HasSubstr("tokens/s")));
}

// Overwrites `count` bf16 elements of a safetensors tensor, from element `first`, with `bits`.
void poison_bf16(const fs::path& file, const std::string& tensor, int64_t first, int64_t count,
                 uint16_t bits) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const nlohmann::json info = nlohmann::json::parse(header).at(tensor);
  ASSERT_EQ(info.at("dtype"), "BF16");
  const uint64_t at = 8 + header_len + info.at("data_offsets")[0].get<uint64_t>() + 2 * first;
  f.seekp(static_cast<std::streamoff>(at));
  for (int64_t i = 0; i < count; ++i) f.write(reinterpret_cast<const char*>(&bits), 2);
}

// A NaN weight in a Hugging Face directory is refused by import and generate, naming the tensor
// and the count (both used to exit 0, generate printing token 0 over and over); weights that
// are finite but overflow the activations stop generate at the step, never decoding NaN.
TEST_F(HfTools, NonFiniteWeightsAndLogitsAreRefused) {
  const fs::path nan_dir = dir_ / "nan_hf", huge_dir = dir_ / "huge_hf";
  fs::copy(kFixture, nan_dir, fs::copy_options::recursive);
  fs::copy(kFixture, huge_dir, fs::copy_options::recursive);
  poison_bf16(nan_dir / "model.safetensors", "model.layers.1.mlp.up_proj.weight", 7, 3, 0x7fc0);
  Result r = run(kBin + "convert_checkpoint --from-hf " + nan_dir.string() + " --to " +
                 (dir_ / "out").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("'model.layers.1.mlp.up_proj.weight' holds 3 non-finite values"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "latest"));
  for (const char* sampling : {"", " --temperature 0.8"}) {
    r = run(kBin + "generate --checkpoint " + nan_dir.string() +
            " --prompt-ids 1,2 --max-new-tokens 5 --print-ids" + sampling);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("model.layers.1.mlp.up_proj.weight"));
    EXPECT_THAT(r.output, HasSubstr("non-finite"));
  }
  // bf16's largest finite value in the final norm and in lm_head's row 5: finite weights whose
  // logit for token 5 overflows.
  poison_bf16(huge_dir / "model.safetensors", "model.norm.weight", 0, 32, 0x7f7f);
  poison_bf16(huge_dir / "model.safetensors", "lm_head.weight", 5 * 32, 32, 0x7f7f);
  r = run(kBin + "generate --checkpoint " + huge_dir.string() +
          " --prompt-ids 1,2 --max-new-tokens 5 --print-ids");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("generation step 1: the model's logits hold"));
  EXPECT_THAT(r.output, HasSubstr("nothing is decoded"));
}

// Import refuses a target holding any file (it used to replace a user's recipe.yaml and mix
// the import in); an adapter export that cannot succeed is refused before the base model is
// written (it used to leave the base behind, so the corrected rerun failed with "not empty").
TEST_F(HfTools, NothingIsOverwrittenOrLeftBehind) {
  const fs::path target = dir_ / "target";
  fs::create_directories(target);
  std::ofstream(target / "recipe.yaml") << "# the user's own recipe\n";
  Result r = run(kBin + "convert_checkpoint --from-hf " + kFixture + " --to " + target.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is not empty (it holds recipe.yaml)"));
  std::ifstream kept(target / "recipe.yaml");
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "# the user's own recipe");
  EXPECT_EQ(std::distance(fs::directory_iterator(target), fs::directory_iterator()), 1);

  const std::string ckpt = (dir_ / "ckpt").string();
  r = run(kBin + "convert_checkpoint --from-hf " + kFixture + " --to " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path base = dir_ / "base_hf", adapter = dir_ / "adapter";
  r = run(kBin + "convert_checkpoint --from " + ckpt + " --to-hf " + base.string() +
          " --peft-adapter " + adapter.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not a LoRA checkpoint"));
  EXPECT_FALSE(fs::exists(base));
  EXPECT_FALSE(fs::exists(adapter));
}

// generate --device cuda: without a usable GPU (or in a CPU-only build) it exits 1 naming the
// flag, before converting or loading anything; with one it gives transformers' greedy tokens,
// as on the CPU.
TEST_F(HfTools, GenerateOnCudaOrAnErrorNamingTheFlag) {
  const Result r = run(kBin + "generate --checkpoint " + kFixture + generate_args() +
                       " --print-ids --device cuda");
  if (!megatron::device_available(megatron::Device::CUDA)) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--device cuda: no CUDA device is visible"));
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(greedy_ids()));
  EXPECT_THAT(r.output, HasSubstr("KV cache, cuda, tp 1"));
}

}  // namespace

namespace {

// The "loss" of each iteration line of a logging.jsonl file.
std::vector<double> jsonl_losses(const std::string& path) {
  std::vector<double> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("iteration") && j.contains("loss") && !j.contains("event"))
      out.push_back(j["loss"].get<double>());
  }
  return out;
}

// checkpoint.pretrained naming a Hugging Face directory trains from exactly the weights an
// explicit import gives; the converted copy is removed; a model section that does not match
// config.json is an error naming both.
TEST_F(HfTools, PretrainedHuggingFaceDirectoryStartsTheRun) {
  const std::string ckpt = (dir_ / "ckpt").string(), save = (dir_ / "save").string();
  Result r = run(kBin + "convert_checkpoint --from-hf " + kFixture + " --to " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string common = kBin + "pretrain --recipe " + ckpt +
                             "/recipe.yaml --set training.train_iters=3 "
                             "--set training.eval_interval=0 --set logging.interval=1 ";
  // The imported recipe starts from the import (checkpoint.pretrained: ckpt).
  r = run(common + "--set logging.jsonl=" + (dir_ / "import.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run(common + "--set checkpoint.pretrained=" + kFixture + " --set checkpoint.save=" + save +
          " --set logging.jsonl=" + (dir_ / "pretrained.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("converting the Hugging Face checkpoint"));
  EXPECT_THAT(r.output, HasSubstr("(weights only)"));
  const auto a = jsonl_losses((dir_ / "import.jsonl").string());
  const auto b = jsonl_losses((dir_ / "pretrained.jsonl").string());
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(fs::exists(fs::path(save) / ".pretrained_import"));
  EXPECT_TRUE(fs::exists(fs::path(save) / "iter_0000003"));

  r = run(common + "--set model.num_layers=3 --set checkpoint.pretrained=" + kFixture);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("num_layers"));
  EXPECT_THAT(r.output, HasSubstr("config.json"));
}

}  // namespace
