#include "data/chat_template.h"

#include <array>

#include "megatron/core/error.h"

namespace megatron::data {

namespace {

constexpr std::array<std::string_view, 8> kNames = {"simple", "plain", "llama2", "llama3",
                                                    "chatml", "qwen3", "gemma",  "phi3"};

// Python's str.strip() for the ASCII whitespace it strips (space, \t \n \v \f \r, \x1c-\x1f).
std::string strip(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
  };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// One piece of a rendered conversation: text to encode, or one token id.
struct Piece {
  std::string text;
  int32_t id = -1;  // >= 0: this token (a special token), no text
  bool trained = false;
};

class Renderer {
 public:
  Renderer(ChatTemplate t, const Tokenizer& tok) : template_(t), tok_(tok) {}

  void text(std::string s, bool trained) { pieces_.push_back({std::move(s), -1, trained}); }
  void id(int32_t token, bool trained) { pieces_.push_back({{}, token, trained}); }
  // A special token written as text in the template (<|im_start|>, ...): one token of the
  // tokenizer, else an error naming it.
  void special(std::string_view name, bool trained) {
    const std::vector<int32_t> ids = tok_.encode(name);
    MT_INPUT_CHECK(ids.size() == 1, "chat template ", chat_template_name(template_), " needs '",
                   name, "' to be one token of ", tok_.describe(), " (it encodes as ", ids.size(),
                   " tokens)");
    id(ids[0], trained);
  }
  int32_t required(int32_t token, const char* what) const {
    MT_INPUT_CHECK(token >= 0, "chat template ", chat_template_name(template_), " needs the ", what,
                   " token, which ", tok_.describe(), " does not have");
    return token;
  }

  // Emits the pieces. Text runs between two ids are encoded whole (as apply_chat_template does)
  // and must split exactly at the loss boundaries; `separately` encodes each piece on its own
  // (the simple and plain templates' definition).
  void finish(bool separately, std::vector<int32_t>& tokens, std::vector<uint8_t>& loss) const {
    auto append = [&](const std::vector<int32_t>& ids, bool trained) {
      tokens.insert(tokens.end(), ids.begin(), ids.end());
      loss.insert(loss.end(), ids.size(), trained ? 1 : 0);
    };
    size_t k = 0;
    while (k < pieces_.size()) {
      if (pieces_[k].id >= 0) {
        tokens.push_back(pieces_[k].id);
        loss.push_back(pieces_[k].trained ? 1 : 0);
        ++k;
        continue;
      }
      size_t end = k;
      bool mixed = false;
      std::string whole;
      while (end < pieces_.size() && pieces_[end].id < 0) {
        mixed |= pieces_[end].trained != pieces_[k].trained;
        whole += pieces_[end].text;
        ++end;
      }
      if (separately || mixed) {
        std::vector<int32_t> parts;
        const size_t before = tokens.size();
        for (size_t p = k; p < end; ++p) append(tok_.encode(pieces_[p].text), pieces_[p].trained);
        parts.assign(tokens.begin() + static_cast<std::ptrdiff_t>(before), tokens.end());
        MT_INPUT_CHECK(separately || parts == tok_.encode(whole), "chat template ",
                       chat_template_name(template_),
                       ": the assistant's span cannot be delimited in tokens: the text '", whole,
                       "' does not tokenize as its parts do (a token crosses the loss boundary)");
      } else {
        append(tok_.encode(whole), pieces_[k].trained);
      }
      k = end;
    }
  }

 private:
  ChatTemplate template_;
  const Tokenizer& tok_;
  std::vector<Piece> pieces_;
};

void render_simple(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  for (const SFTMessage& m : messages) {
    if (m.role == "assistant") {
      r.text("<|assistant|>\n", false);
      r.text(m.content, true);
      r.id(r.required(tok.eod(), "end-of-document"), true);
    } else {
      r.text(concat("<|", m.role, "|>\n", m.content, "\n"), false);
    }
  }
}

void render_plain(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  for (const SFTMessage& m : messages) {
    r.text(m.content, m.role == "assistant");
    if (m.role == "assistant") r.id(r.required(tok.eod(), "end-of-document"), true);
  }
}

void render_llama2(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  for (size_t k = first; k < messages.size(); ++k) {
    const SFTMessage& m = messages[k];
    const bool user_turn = (k - first) % 2 == 0;
    MT_INPUT_CHECK(m.role == (user_turn ? "user" : "assistant"),
                   "chat template llama2: roles must alternate user/assistant after an optional "
                   "system message (message ",
                   k + 1, " is '", m.role, "')");
    if (user_turn) {
      std::string content = m.content;
      if (k == first && has_system)
        content = concat("<<SYS>>\n", system, "\n<</SYS>>\n\n", content);
      r.id(r.required(tok.bos(), "beginning-of-sequence"), false);
      r.text(concat("[INST] ", strip(content), " [/INST]"), false);
    } else {
      r.text(concat(" ", strip(m.content), " "), true);
      r.id(r.required(tok.eos(), "end-of-sequence"), true);
    }
  }
}

void render_llama3(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  r.id(r.required(tok.bos(), "beginning-of-sequence"), false);
  for (const SFTMessage& m : messages) {
    const bool trained = m.role == "assistant";
    r.special("<|start_header_id|>", false);
    r.text(m.role, false);
    r.special("<|end_header_id|>", false);
    r.text("\n\n", false);
    r.text(strip(m.content), trained);
    r.special("<|eot_id|>", trained);
  }
}

void render_chatml(Renderer& r, std::span<const SFTMessage> messages) {
  for (const SFTMessage& m : messages) {
    const bool trained = m.role == "assistant";
    r.special("<|im_start|>", false);
    r.text(concat(m.role, "\n"), false);
    r.text(m.content, trained);
    r.special("<|im_end|>", trained);
    r.text("\n", false);
  }
}

// Roles alternate user/assistant after an optional leading system message (llama2, gemma).
void check_alternating(std::span<const SFTMessage> messages, size_t first, const char* name) {
  for (size_t k = first; k < messages.size(); ++k)
    MT_INPUT_CHECK(messages[k].role == ((k - first) % 2 == 0 ? "user" : "assistant"),
                   "chat template ", name,
                   ": roles must alternate user/assistant after an optional system message "
                   "(message ",
                   k + 1, " is '", messages[k].role, "')");
}

std::string lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return std::string(s);
}
std::string strip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return lstrip_newlines(s);
}

// An answer's reasoning and content: the text between <think> and </think>, and what follows
// </think> (Qwen3's template: split on the last </think>, then on the last <think>).
std::pair<std::string, std::string> split_reasoning(const std::string& answer) {
  const size_t close = answer.rfind("</think>");
  if (close == std::string::npos) return {"", answer};
  const std::string content = lstrip_newlines(std::string_view(answer).substr(close + 8));
  std::string_view before = std::string_view(answer).substr(0, answer.find("</think>"));
  while (!before.empty() && before.back() == '\n') before.remove_suffix(1);
  const size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before = before.substr(open + 7);
  return {lstrip_newlines(before), content};
}

void render_qwen3(Renderer& r, std::span<const SFTMessage> messages) {
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;)
    if (messages[k].role == "user") {
      last_query = k;
      break;
    }
  for (size_t k = 0; k < messages.size(); ++k) {
    const SFTMessage& m = messages[k];
    r.special("<|im_start|>", false);
    r.text(concat(m.role, "\n"), false);
    if (m.role != "assistant") {
      r.text(m.content, false);
      r.special("<|im_end|>", false);
      r.text("\n", false);
      continue;
    }
    const auto [reasoning, content] = split_reasoning(m.content);
    const bool last = k + 1 == messages.size();
    if (k > last_query && (last || !reasoning.empty())) {
      r.special("<think>", true);
      r.text(concat("\n", strip_newlines(reasoning), "\n"), true);
      r.special("</think>", true);
      r.text(concat("\n\n", lstrip_newlines(content)), true);
    } else {
      r.text(content, true);
    }
    r.special("<|im_end|>", true);
    r.text("\n", false);
  }
}

void render_gemma(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  r.id(r.required(tok.bos(), "beginning-of-sequence"), false);
  size_t first = 0;
  std::string prefix;
  if (!messages.empty() && messages[0].role == "system") {
    prefix = messages[0].content + "\n\n";
    first = 1;
  }
  check_alternating(messages, first, "gemma");
  for (size_t k = first; k < messages.size(); ++k) {
    const bool answer = messages[k].role == "assistant";
    r.special("<start_of_turn>", false);
    r.text(concat(answer ? "model" : "user", "\n", k == first ? prefix : ""), false);
    r.text(strip(messages[k].content), answer);
    r.special("<end_of_turn>", answer);
    r.text("\n", false);
  }
}

void render_phi3(Renderer& r, std::span<const SFTMessage> messages, const Tokenizer& tok) {
  for (const SFTMessage& m : messages) {
    const bool answer = m.role == "assistant";
    r.special(concat("<|", m.role, "|>"), false);
    r.text("\n", false);
    r.text(m.content, answer);
    r.special("<|end|>", answer);
    r.text("\n", false);
  }
  r.id(r.required(tok.eos(), "end-of-sequence"), false);
}

}  // namespace

ChatTemplate chat_template_from_name(std::string_view name) {
  for (size_t k = 0; k < kNames.size(); ++k)
    if (kNames[k] == name) return static_cast<ChatTemplate>(k);
  throw InputError(concat("unknown chat template '", name,
                          "' (expected simple, plain, llama2, llama3, chatml, qwen3, gemma or "
                          "phi3)"));
}

std::string_view chat_template_name(ChatTemplate t) { return kNames.at(static_cast<size_t>(t)); }

void tokenize_conversation(ChatTemplate chat_template, std::span<const SFTMessage> messages,
                           const Tokenizer& tokenizer, std::vector<int32_t>& tokens,
                           std::vector<uint8_t>& loss) {
  for (const SFTMessage& m : messages)
    MT_INPUT_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant",
                   "unknown chat role '", m.role, "' (expected system, user or assistant)");
  Renderer r(chat_template, tokenizer);
  switch (chat_template) {
    case ChatTemplate::Simple:
      render_simple(r, messages, tokenizer);
      break;
    case ChatTemplate::Plain:
      render_plain(r, messages, tokenizer);
      break;
    case ChatTemplate::Llama2:
      render_llama2(r, messages, tokenizer);
      break;
    case ChatTemplate::Llama3:
      render_llama3(r, messages, tokenizer);
      break;
    case ChatTemplate::ChatML:
      render_chatml(r, messages);
      break;
    case ChatTemplate::Qwen3:
      render_qwen3(r, messages);
      break;
    case ChatTemplate::Gemma:
      render_gemma(r, messages, tokenizer);
      break;
    case ChatTemplate::Phi3:
      render_phi3(r, messages, tokenizer);
      break;
  }
  const bool separately =
      chat_template == ChatTemplate::Simple || chat_template == ChatTemplate::Plain;
  r.finish(separately, tokens, loss);
}

std::vector<int32_t> generation_prompt(ChatTemplate chat_template,
                                       std::span<const SFTMessage> messages,
                                       const Tokenizer& tokenizer, int32_t& end_of_turn) {
  MT_INPUT_CHECK(!messages.empty() && messages.back().role == "user",
                 "a generation prompt ends with a user message");
  std::vector<SFTMessage> with_answer(messages.begin(), messages.end());
  with_answer.push_back({"assistant", ""});
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  tokenize_conversation(chat_template, with_answer, tokenizer, tokens, loss);
  // The empty answer is the last run of trained tokens (earlier answers are trained too); it
  // ends with the token closing the turn.
  size_t last = loss.size();
  while (last > 0 && loss[last - 1] == 0) --last;
  MT_CHECK(last > 0, "chat template ", chat_template_name(chat_template),
           ": an empty answer has no trained closing token");
  size_t first = last - 1;
  while (first > 0 && loss[first - 1] == 1) --first;
  end_of_turn = tokens[last - 1];
  tokens.resize(first);
  return tokens;
}

}  // namespace megatron::data
