// mpirun-np: 2 4
// Supervised fine-tuning on packed conversations (data.sft: loss on the answers only, positions
// and attention kept per conversation) trained by the Trainer under tensor (+ sequence),
// pipeline and data parallelism gives the single-process loss and gradient-norm curve: the loss
// is normalised by the trained tokens of the whole global batch, whatever the layout; and under
// context parallelism, where the conversations cross the chunk borders of the ranks (each keeps
// its own positions and attention across them, no length divisible by anything).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/sft_dataset.h"
#include "equivalence_fixture.h"
#include "megatron/training/sft_source.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

// Bytes folded into the fixture's vocabulary (36 symbols + EOD).
class TinyTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c % (eq::kVocab - 1)));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    return std::string(ids.size(), '?');
  }
  int64_t vocab_size() const override { return eq::kVocab; }
  int32_t eod() const override { return eq::kVocab - 1; }
};

// Conversations of very different lengths (so micro-batches differ in trained tokens), one
// file per process.
std::shared_ptr<const training::BatchSource> sft_source(int64_t seq) {
  std::ostringstream name;
  name << "sft_equivalence_" << ::getpid() << ".jsonl";
  const std::string path = (std::filesystem::temp_directory_path() / name.str()).string();
  {
    std::ofstream out(path);
    for (int k = 0; k < 48; ++k) {
      std::ostringstream prompt, answer;
      prompt << "q" << k << std::string(size_t(k % 5), '?');
      answer << "a" << (k % 7) << std::string(size_t((k * 7) % 23), static_cast<char>('b' + k % 5));
      out << nlohmann::json({{"prompt", prompt.str()}, {"response", answer.str()}}).dump() << "\n";
    }
  }
  static const TinyTokenizer tok;
  auto conversations = data::SFTConversations::load(path, tok);
  std::filesystem::remove(path);
  data::SFTDatasetConfig cfg;
  cfg.seq_length = seq;
  cfg.num_samples = 400;
  cfg.log = [](const std::string&) {};
  auto ds = data::SFTDataset::build(conversations, 0, "1", cfg);
  return std::make_shared<training::SFTBatchSource>(
      std::vector<std::shared_ptr<const data::SFTDataset>>{ds}, std::vector<double>{1.0}, 0);
}

TEST(SFTEquivalence, PackedConversationsMatchSingleProcess) {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  llama.seq = 64;
  llama.micro = 4;
  llama.seed = 5;
  llama.iters = 12;
  const auto src = sft_source(llama.seq);
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("sft equivalence");
}

TEST(SFTEquivalence, PackedConversationsUnderContextParallelism) {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .heads = 8, .groups = 4, .ffn = 48};
  llama.seq = 64;
  llama.micro = 4;
  llama.seed = 5;
  llama.iters = 12;
  const auto src = sft_source(llama.seq);
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("sft context-parallel equivalence");
}

}  // namespace
}  // namespace megatron
