// Chat templates (data/chat_template.h) against transformers' apply_chat_template: the token ids,
// the assistant mask and the generation prompt transformers computed for the same conversations
// (tests/fixtures/chat_templates, made by tools/gen_chat_template_fixtures.py); the errors for
// conversations or tokenizers a template cannot express.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/chat_template_jinja.h"
#include "data/tokenizer.h"
#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;

fs::path fixtures() {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";
}

std::unique_ptr<Tokenizer> fixture_tokenizer(const std::string& name) {
  return make_tokenizer({config::TokenizerType::HuggingFace, "", "", (fixtures() / name).string()});
}

std::vector<SFTMessage> messages_of(const nlohmann::json& j) {
  std::vector<SFTMessage> out;
  for (const auto& m : j)
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(ChatTemplate, IdsAndMasksMatchTransformers) {
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  std::ifstream in(fixtures() / "expected.jsonl");
  ASSERT_TRUE(in.is_open());
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string name = j["tokenizer"].get<std::string>();
    if (!toks.count(name)) toks[name] = fixture_tokenizer(name);
    const ChatTemplate t = chat_template_from_name(j["template"].get<std::string>());
    SCOPED_TRACE(::testing::Message() << j["template"] << " conversation " << j["conversation"]);
    std::vector<int32_t> tokens;
    std::vector<uint8_t> loss;
    tokenize_conversation(t, messages_of(j["messages"]), *toks[name], tokens, loss);
    EXPECT_EQ(tokens, j["ids"].get<std::vector<int32_t>>());
    const auto mask = j["assistant_mask"].get<std::vector<int>>();
    ASSERT_EQ(loss.size(), mask.size());
    for (size_t k = 0; k < mask.size(); ++k) EXPECT_EQ(int(loss[k]), mask[k]) << "token " << k;
    // add_generation_prompt on the conversation up to its last question.
    const std::vector<SFTMessage> all = messages_of(j["messages"]);
    size_t last_user = 0;
    for (size_t k = 0; k < all.size(); ++k)
      if (all[k].role == "user") last_user = k;
    int32_t end_of_turn = -1;
    const std::vector<SFTMessage> question(
        all.begin(), all.begin() + static_cast<std::ptrdiff_t>(last_user + 1));
    EXPECT_EQ(generation_prompt(t, question, *toks[name], end_of_turn),
              j["generation_prompt"].get<std::vector<int32_t>>());
    EXPECT_GE(end_of_turn, 0);
    ++checked;
  }
  EXPECT_EQ(checked, 38);  // 6 conversations x 6 templates, and Qwen3's 2 with reasoning
}

// The first answer token and the token closing the turn are trained; nothing before the answer.
// The Jinja an export writes as chat_template is the text that rendered the fixtures' ids in
// transformers (templates.json); this framework's own templates have none.
TEST(ChatTemplate, JinjaIsTheTemplateTransformersRendered) {
  std::ifstream in(fixtures() / "templates.json");
  const nlohmann::json templates = nlohmann::json::parse(in);
  for (const auto& [name, jinja] : templates.items())
    EXPECT_EQ(std::string(chat_template_jinja(chat_template_from_name(name))),
              jinja.get<std::string>())
        << name;
  EXPECT_EQ(templates.size(), 6u);
  EXPECT_TRUE(chat_template_jinja(ChatTemplate::Simple).empty());
  EXPECT_TRUE(chat_template_jinja(ChatTemplate::Plain).empty());
}

TEST(ChatTemplate, ChatMLTrainsAnswerAndImEnd) {
  const auto tok = fixture_tokenizer("chatml");
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  tokenize_conversation(ChatTemplate::ChatML, {{{"user", "Hi"}, {"assistant", "Hello there"}}},
                        *tok, tokens, loss);
  const int32_t im_end = tok->encode("<|im_end|>").at(0);
  const auto answer = tok->encode("Hello there");
  // ... <|im_start|> assistant \n | Hello there <|im_end|> | \n
  ASSERT_GE(tokens.size(), answer.size() + 2);
  const size_t end = tokens.size() - 2;  // <|im_end|>
  EXPECT_EQ(tokens[end], im_end);
  EXPECT_EQ(loss[end], 1);
  EXPECT_EQ(loss.back(), 0);  // the newline after <|im_end|>
  const size_t first = end - answer.size();
  EXPECT_EQ(loss[first], 1);
  EXPECT_EQ(loss[first - 1], 0);
  for (size_t k = 0; k < first; ++k) EXPECT_EQ(loss[k], 0) << k;
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError (expected one mentioning '" << needle << "')";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ErrorsInsteadOfGuessedMasks) {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  const auto llama3 = fixture_tokenizer("llama3");
  // llama2: roles must alternate.
  expect_input_error(
      [&] {
        tokenize_conversation(ChatTemplate::Llama2,
                              {{{"user", "a"}, {"user", "b"}, {"assistant", "c"}}},
                              *fixture_tokenizer("llama2"), tokens, loss);
      },
      "roles must alternate");
  // chatml with a tokenizer that lacks <|im_start|>.
  expect_input_error(
      [&] {
        tokenize_conversation(ChatTemplate::ChatML, {{{"user", "a"}, {"assistant", "b"}}}, *llama3,
                              tokens, loss);
      },
      "<|im_start|>");
  // llama2 with a tokenizer without BOS.
  expect_input_error(
      [&] {
        tokenize_conversation(ChatTemplate::Llama2, {{{"user", "a"}, {"assistant", "b"}}},
                              *fixture_tokenizer("chatml"), tokens, loss);
      },
      "beginning-of-sequence");
  // chatml: an answer that merges with the header's newline into one token cannot be delimited.
  expect_input_error(
      [&] {
        tokenize_conversation(ChatTemplate::ChatML, {{{"user", "a"}, {"assistant", "\n\nb"}}},
                              *fixture_tokenizer("chatml"), tokens, loss);
      },
      "cannot be delimited");
  expect_input_error([] { chat_template_from_name("vicuna"); }, "unknown chat template 'vicuna'");
}

}  // namespace
}  // namespace megatron::data
