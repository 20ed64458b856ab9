// SFTDataset (data/sft_dataset.h): the chat template and its loss mask, packing and padding,
// truncation, splits, errors with file and line, the shipped example, inspect_data --dataset-type
// sft.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "data/sft_dataset.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

using testing::expect_input_error;
using testing::read_text;
using testing::ScratchDir;
using testing::write_text;

const std::string kSource = MEGATRON_SOURCE_DIR;
const std::string kExample = kSource + "/data/finetune/example_sft.jsonl";
const std::string kModel = kSource + "/tokenizers/corpus_spm_8k.model";

void quiet(const std::string&) {}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string pr(const std::string& prompt, const std::string& response) {
  return nlohmann::json({{"prompt", prompt}, {"response", response}}).dump() + "\n";
}

TEST(SFTTemplate, PromptResponseLossCoversResponseAndEod) {
  ByteTokenizer tok;
  const std::vector<SFTMessage> msgs = {{"user", "Who?"}, {"assistant", "Emma."}};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  tokenize_conversation(ChatTemplate::Simple, msgs, tok, tokens, loss);
  const auto head = cat({tok.encode("<|user|>\nWho?\n"), tok.encode("<|assistant|>\n")});
  const auto body = tok.encode("Emma.");
  EXPECT_EQ(tokens, cat({head, body, {ByteTokenizer::kEod}}));
  ASSERT_EQ(loss.size(), tokens.size());
  for (size_t i = 0; i < loss.size(); ++i) EXPECT_EQ(loss[i], i >= head.size() ? 1 : 0) << i;
}

TEST(SFTTemplate, ChatRoles) {
  ByteTokenizer tok;
  const std::vector<SFTMessage> msgs = {{"system", "Be brief."},
                                        {"user", "A?"},
                                        {"assistant", "B."},
                                        {"user", "C?"},
                                        {"assistant", ""}};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  tokenize_conversation(ChatTemplate::Simple, msgs, tok, tokens, loss);
  const int32_t E = ByteTokenizer::kEod;
  const auto off0 = cat({tok.encode("<|system|>\nBe brief.\n<|user|>\nA?\n<|assistant|>\n")});
  const auto on0 = cat({tok.encode("B."), {E}});
  const auto off1 = tok.encode("<|user|>\nC?\n<|assistant|>\n");
  const std::vector<int32_t> on1 = {E};  // an empty answer still trains its EOD
  EXPECT_EQ(tokens, cat({off0, on0, off1, on1}));
  std::vector<uint8_t> want;
  want.insert(want.end(), off0.size(), 0);
  want.insert(want.end(), on0.size(), 1);
  want.insert(want.end(), off1.size(), 0);
  want.insert(want.end(), on1.size(), 1);
  EXPECT_EQ(loss, want);
  // The prompt/response form is the same as messages [system,] user, assistant.
  EXPECT_EQ(
      parse_sft_line(R"({"system": "S", "prompt": "P", "response": "R", "id": 7})", "x:1").size(),
      3u);
  const auto m = parse_sft_line(R"({"prompt": "P", "response": "R"})", "x:1");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].content, "R");
}

TEST(SFTConversations, ErrorsNameFileAndLine) {
  ScratchDir dir;
  ByteTokenizer tok;
  const std::string good = pr("p", "r");
  const auto check = [&](const std::string& bad_line, const std::vector<std::string>& needles) {
    const std::string f = dir.file("bad.jsonl");
    write_text(f, good + "\n" + bad_line + "\n" + good);  // line 2 is blank: the bad one is 3
    std::vector<std::string> n = needles;
    n.push_back(f + ":3:");
    expect_input_error([&] { SFTConversations::load(f, tok); }, n);
  };
  check("{not json", {"invalid JSON"});
  check("[1, 2]", {"expected a JSON object"});
  check(R"({"prompt": "p"})", {"no \"response\""});
  check(R"({"text": "p"})", {"expected \"messages\""});
  check(R"({"prompt": "p", "response": 5})", {"\"response\" is not a string"});
  check(R"({"prompt": "p", "response": "r", "messages": []})", {"both"});
  check(R"({"messages": []})", {"\"messages\" is empty"});
  check(R"({"messages": {"role": "user"}})", {"not an array"});
  check(R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})",
        {"message 2", "unknown role 'bot'"});
  check(R"({"messages": [{"role": "user"}]})", {"message 1", "no \"content\""});
  check(R"({"messages": [{"role": "user", "content": "only a question"}]})",
        {"no assistant message"});
  expect_input_error([&] { SFTConversations::load(dir.file("missing.jsonl"), tok); },
                     {"missing.jsonl"});
  write_text(dir.file("empty.jsonl"), "\n  \n");
  expect_input_error([&] { SFTConversations::load(dir.file("empty.jsonl"), tok); },
                     {"empty.jsonl", "no conversation"});
}

// n conversations "q<k>" -> "answer <k>" + k extra 'x' (lengths differ).
std::shared_ptr<const SFTConversations> make_data(const ScratchDir& dir, int n) {
  std::string text;
  for (int k = 0; k < n; ++k) {
    std::string prompt = "q", response = "answer ";
    prompt += std::to_string(k);
    response += std::to_string(k);
    response.append(static_cast<size_t>(k), 'x');
    text += pr(prompt, response);
  }
  write_text(dir.file("conv.jsonl"), text);
  static ByteTokenizer tok;
  return SFTConversations::load(dir.file("conv.jsonl"), tok);
}

// The per-token loss flags of the sample's real tokens, from the conversations themselves.
void check_sample_against_conversations(const SFTDataset& ds, const SFTSample& s) {
  const auto& conv = ds.conversations();
  const auto window = static_cast<size_t>(ds.seq_length() + 1);
  ASSERT_EQ(s.tokens.size(), window);
  ASSERT_EQ(s.loss_mask.size(), window - 1);
  std::vector<int32_t> tokens;
  std::vector<uint8_t> flags;
  for (size_t k = 0; k < s.conversations.size(); ++k) {
    ASSERT_EQ(static_cast<size_t>(s.document_starts[k]), tokens.size());
    const auto t = conv.tokens(s.conversations[k]);
    const auto l = conv.loss(s.conversations[k]);
    tokens.insert(tokens.end(), t.begin(), t.end());
    flags.insert(flags.end(), l.begin(), l.end());
  }
  if (tokens.size() > window) {
    ASSERT_EQ(s.conversations.size(), 1u);  // only a lone conversation is truncated
    ASSERT_EQ(s.truncated, 1);
    if (ds.truncation() == SFTTruncation::Left) {  // its end is kept
      const auto cut = static_cast<std::ptrdiff_t>(tokens.size() - window);
      tokens.erase(tokens.begin(), tokens.begin() + cut);
      flags.erase(flags.begin(), flags.begin() + cut);
    }
    tokens.resize(window);
    flags.resize(window);
  } else {
    ASSERT_EQ(s.truncated, 0);
  }
  ASSERT_EQ(static_cast<size_t>(s.num_tokens), tokens.size());
  for (size_t t = 0; t < window; ++t) {
    if (t < tokens.size()) {
      ASSERT_EQ(s.tokens[t], tokens[t]) << t;
    } else {
      ASSERT_EQ(s.tokens[t], conv.pad_id()) << t;
    }
    // loss_mask[t - 1] is the flag of token t (the label of position t - 1); padding is 0.
    if (t > 0) {
      ASSERT_EQ(s.loss_mask[t - 1], t < tokens.size() ? flags[t] : 0) << t;
    }
  }
}

TEST(SFTDataset, PackedKeepsConversationsWholeAndCoversEachOncePerEpoch) {
  ScratchDir dir;
  const auto data = make_data(dir, 30);
  SFTDatasetConfig cfg;
  cfg.seq_length = 96;
  cfg.log = quiet;
  const auto ds = SFTDataset::build(data, 0, "1", cfg);
  EXPECT_EQ(ds->num_epochs(), 1);
  EXPECT_EQ(ds->num_truncated_conversations(), 0);
  std::multiset<int64_t> seen;
  int64_t multi = 0, used = 0;
  for (int64_t i = 0; i < ds->num_samples(); ++i) {
    SCOPED_TRACE(i);
    const SFTSample s = ds->get_sample(i);
    check_sample_against_conversations(*ds, s);
    seen.insert(s.conversations.begin(), s.conversations.end());
    multi += s.conversations.size() > 1;
    used += s.num_tokens;
    // The next conversation would not have fitted (greedy packing in order).
    if (i + 1 < ds->num_samples()) {
      const SFTSample next = ds->get_sample(i + 1);
      const int64_t first_len = static_cast<int64_t>(data->tokens(next.conversations[0]).size());
      EXPECT_GT(s.num_tokens + first_len, 97);
    }
    std::vector<int32_t> raw(97);
    ds->get(i, raw.data());
    EXPECT_EQ(raw, s.tokens);
  }
  std::multiset<int64_t> all;
  for (int64_t c = 0; c < 30; ++c) all.insert(c);
  EXPECT_EQ(seen, all);
  EXPECT_GT(multi, 0);
  EXPECT_EQ(used, data->num_tokens());
  EXPECT_EQ(ds->num_padding_tokens(), ds->num_samples() * 97 - used);
}

TEST(SFTDataset, PaddedHoldsOneConversationAndTruncates) {
  ScratchDir dir;
  const auto data = make_data(dir, 30);
  SFTDatasetConfig cfg;
  cfg.seq_length = 40;
  cfg.packing = SFTPacking::Padded;
  std::vector<std::string> logs;
  cfg.log = [&](const std::string& l) { logs.push_back(l); };
  const auto ds = SFTDataset::build(data, 0, "1", cfg);
  ASSERT_EQ(ds->num_samples(), 30);
  int64_t longer = 0;
  for (int64_t c = 0; c < 30; ++c) longer += data->tokens(c).size() > 41;
  ASSERT_GT(longer, 0);
  EXPECT_EQ(ds->num_truncated_conversations(), longer);
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_NE(logs[1].find("warning"), std::string::npos);
  EXPECT_NE(logs[1].find(std::to_string(longer) + " of 30 conversations"), std::string::npos)
      << logs[1];
  int64_t truncated = 0;
  for (int64_t i = 0; i < 30; ++i) {
    SCOPED_TRACE(i);
    const SFTSample s = ds->get_sample(i);
    ASSERT_EQ(s.conversations.size(), 1u);
    check_sample_against_conversations(*ds, s);
    truncated += s.truncated;
  }
  EXPECT_EQ(truncated, longer);
  EXPECT_EQ(data->pad_id(), ByteTokenizer::kEod);  // no pad token: EOD pads
}

TEST(SFTDataset, TruncationInPackedMode) {
  ScratchDir dir;
  const auto data = make_data(dir, 30);
  SFTDatasetConfig cfg;
  cfg.seq_length = 36;
  cfg.log = quiet;
  const auto ds = SFTDataset::build(data, 0, "1", cfg);
  EXPECT_GT(ds->num_truncated_conversations(), 0);
  for (int64_t i = 0; i < ds->num_samples(); ++i) {
    SCOPED_TRACE(i);
    check_sample_against_conversations(*ds, ds->get_sample(i));
  }
}

// `long_ones` conversations whose 60-byte prompt pushes every answer token past a 41-token
// window, then `short_ones` that fit.
std::shared_ptr<const SFTConversations> make_long_prompt_data(const ScratchDir& dir, int long_ones,
                                                              int short_ones) {
  std::string text;
  for (int k = 0; k < long_ones; ++k) text += pr(std::string(60, 'p') + std::to_string(k), "a");
  for (int k = 0; k < short_ones; ++k) text += pr("q" + std::to_string(k), "answer");
  write_text(dir.file("long_prompts.jsonl"), text);
  static ByteTokenizer tok;
  return SFTConversations::load(dir.file("long_prompts.jsonl"), tok);
}

int64_t trained_tokens(const SFTSample& s) {
  return std::count(s.loss_mask.begin(), s.loss_mask.end(), uint8_t{1});
}

// Truncated on the right, a conversation whose answer lies past the window would only add
// samples with nothing to learn (a whole global batch of them stopped SFT runs): it is dropped
// at build time, counted, and the log names the file; left truncation keeps its answer instead.
TEST(SFTDataset, ConversationsWithNoTrainedTokenInTheWindowAreDropped) {
  ScratchDir dir;
  const auto data = make_long_prompt_data(dir, 6, 4);
  for (const SFTPacking packing : {SFTPacking::Packed, SFTPacking::Padded}) {
    SCOPED_TRACE(packing == SFTPacking::Packed ? "packed" : "padded");
    SFTDatasetConfig cfg;
    cfg.seq_length = 40;
    cfg.packing = packing;
    std::vector<std::string> logs;
    cfg.log = [&](const std::string& l) { logs.push_back(l); };
    const auto right = SFTDataset::build(data, 0, "1", cfg);
    EXPECT_EQ(right->num_truncated_conversations(), 6);
    EXPECT_EQ(right->num_dropped_conversations(), 6);
    ASSERT_EQ(logs.size(), 3u);
    EXPECT_NE(logs[2].find("long_prompts.jsonl"), std::string::npos) << logs[2];
    EXPECT_NE(logs[2].find("6 of 10 conversations have no trained"), std::string::npos) << logs[2];
    for (int64_t i = 0; i < right->num_samples(); ++i) {
      const SFTSample s = right->get_sample(i);
      EXPECT_GT(trained_tokens(s), 0) << i;
      for (const int64_t c : s.conversations) EXPECT_GE(c, 6) << i;  // only the short ones
    }

    cfg.truncation = SFTTruncation::Left;
    const auto left = SFTDataset::build(data, 0, "1", cfg);
    EXPECT_EQ(left->num_dropped_conversations(), 0);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < left->num_samples(); ++i) {
      SCOPED_TRACE(i);
      const SFTSample s = left->get_sample(i);
      check_sample_against_conversations(*left, s);
      EXPECT_GT(trained_tokens(s), 0);
      seen.insert(s.conversations.begin(), s.conversations.end());
    }
    EXPECT_EQ(seen.size(), 10u);

    cfg.truncation = SFTTruncation::Drop;
    const auto drop = SFTDataset::build(data, 0, "1", cfg);
    EXPECT_EQ(drop->num_dropped_conversations(), 6);
  }
}

// A file where no conversation keeps a trained token is an error at start naming the file, not
// a run that stops at iteration 1 (or loops forever looking for samples).
TEST(SFTDataset, NothingToTrainOnIsAnErrorNamingTheFile) {
  ScratchDir dir;
  const auto data = make_long_prompt_data(dir, 5, 0);
  SFTDatasetConfig cfg;
  cfg.seq_length = 40;
  cfg.num_samples = 100;
  cfg.log = quiet;
  for (const SFTTruncation t : {SFTTruncation::Right, SFTTruncation::Drop}) {
    cfg.truncation = t;
    expect_input_error(
        [&] { SFTDataset::build(data, 0, "1", cfg); },
        {"long_prompts.jsonl", "none of its 5 conversations", "nothing to train on"});
  }
  cfg.truncation = SFTTruncation::Left;
  EXPECT_EQ(SFTDataset::build(data, 0, "1", cfg)->num_samples(), 100);
  EXPECT_EQ(sft_truncation_from_name("left"), SFTTruncation::Left);
  expect_input_error([] { sft_truncation_from_name("middle"); }, {"middle", "right, left or drop"});
}

TEST(SFTDataset, SplitsShuffleAndEpochs) {
  ScratchDir dir;
  const auto data = make_data(dir, 10);
  SFTDatasetConfig cfg;
  cfg.seq_length = 64;
  cfg.packing = SFTPacking::Padded;
  cfg.log = quiet;
  const auto train = SFTDataset::build(data, 0, "8,2", cfg);
  const auto valid = SFTDataset::build(data, 1, "8,2", cfg);
  EXPECT_EQ(train->conversation_range().begin, 0);
  EXPECT_EQ(train->conversation_range().end, 8);
  EXPECT_EQ(valid->conversation_range().begin, 8);
  EXPECT_EQ(valid->conversation_range().end, 10);
  const auto order = [](const SFTDataset& ds) {
    std::vector<int64_t> o;
    for (int64_t i = 0; i < ds.num_samples(); ++i) o.push_back(ds.get_sample(i).conversations[0]);
    return o;
  };
  const auto o1 = order(*train);
  EXPECT_EQ(o1, order(*SFTDataset::build(data, 0, "8,2", cfg)));  // deterministic
  std::vector<int64_t> sorted = o1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_NE(o1, sorted);  // shuffled (seed 1234)
  cfg.seed = 5;
  EXPECT_NE(order(*SFTDataset::build(data, 0, "8,2", cfg)), o1);
  for (const int64_t c : order(*valid)) EXPECT_GE(c, 8);
  // Epochs: 20 samples of 8 conversations -> 3 epochs, each a permutation, reshuffled.
  cfg.seed = 1234;
  cfg.num_samples = 20;
  const auto three = SFTDataset::build(data, 0, "8,2", cfg);
  EXPECT_EQ(three->num_epochs(), 3);
  EXPECT_EQ(three->num_samples(), 24);
  const auto o3 = order(*three);
  EXPECT_EQ(std::vector<int64_t>(o3.begin(), o3.begin() + 8), o1);
  EXPECT_NE(std::vector<int64_t>(o3.begin() + 8, o3.begin() + 16), o1);
  // An empty split and bad settings.
  expect_input_error([&] { SFTDataset::build(data, 2, "8,2", cfg); },
                     {"conv.jsonl", "test split", "8,2"});
  cfg.seq_length = 0;
  expect_input_error([&] { SFTDataset::build(data, 0, "8,2", cfg); }, {"seq_length"});
  EXPECT_EQ(sft_packing_from_name("padded"), SFTPacking::Padded);
  expect_input_error([] { sft_packing_from_name("bin"); }, {"bin"});
}

TEST(SFTDataset, ShippedExampleWithTheCorpusTokenizer) {
  const auto tok = make_tokenizer({config::TokenizerType::SentencePiece, "", "", kModel});
  const auto data = SFTConversations::load(kExample, *tok);
  EXPECT_GE(data->size(), 20);
  EXPECT_LE(data->size(), 50);
  EXPECT_EQ(data->pad_id(), tok->pad());
  for (int64_t c = 0; c < data->size(); ++c) {
    const auto loss = data->loss(c);
    const auto toks = data->tokens(c);
    EXPECT_GT(std::count(loss.begin(), loss.end(), uint8_t{1}), 1) << "conversation " << c;
    EXPECT_EQ(loss[0], 0);
    EXPECT_EQ(toks.back(), tok->eod());
    EXPECT_EQ(loss.back(), 1);
    for (size_t k = 0; k < toks.size(); ++k)
      if (toks[k] == tok->eod()) {
        EXPECT_EQ(loss[k], 1);  // every EOD is trained on
      }
  }
  SFTDatasetConfig cfg;
  cfg.seq_length = 256;
  cfg.log = quiet;
  const auto ds = SFTDataset::build(data, 0, "969,30,1", cfg);
  for (int64_t i = 0; i < ds->num_samples(); ++i)
    check_sample_against_conversations(*ds, ds->get_sample(i));
  // Decoding the trained-on tokens of conversation 0 gives its response and the EOD.
  const auto t0 = data->tokens(0);
  const auto l0 = data->loss(0);
  std::vector<int32_t> on;
  for (size_t k = 0; k < t0.size(); ++k)
    if (l0[k] && t0[k] != tok->eod()) on.push_back(t0[k]);
  const std::string first_line = read_text(kExample).substr(0, read_text(kExample).find('\n'));
  const auto msgs = parse_sft_line(first_line, "example:1");
  EXPECT_EQ(tok->decode(on), msgs.back().content);
}

TEST(SFTDataset, InspectDataMarksThePrompt) {
  ScratchDir dir;
  write_text(dir.file("one.jsonl"), pr("Who is Emma?", "A heroine."));
  const std::string exe = std::string(MEGATRON_BINARY_DIR) + "/bin/inspect_data";
  ASSERT_TRUE(std::filesystem::exists(exe)) << exe << " is not built";
  const std::string cmd = "'" + exe + "' --data-path '" + dir.file("one.jsonl") +
                          "' --dataset-type sft --split-weights 1 --sample 0 --seq-length 60 " +
                          "--tokenizer-type ByteTokenizer > '" + dir.file("out") + "' 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir.file("out"));
  const std::string out = read_text(dir.file("out"));
  EXPECT_NE(out.find("conversations 1"), std::string::npos) << out;
  EXPECT_NE(out.find("[[<|user|>\nWho is Emma?\n<|assistant|>\n]]A heroine.<|endoftext|>[[<pad id "
                     "256 x "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("loss mask (label t = token t+1): "), std::string::npos) << out;
}

}  // namespace
}  // namespace megatron::data
