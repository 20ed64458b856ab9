#pragma once
// Chat templates for supervised fine-tuning: a conversation (system / user / assistant messages)
// to token ids and a per-token loss flag (1 = trained: the assistant's answer tokens and the
// token that ends its turn, nothing else).
//
//   simple   role headers as plain text, each message tokenized on its own (no special tokens;
//            works with any tokenizer):
//              system/user  encode("<|ROLE|>\n" + content + "\n")               loss off
//              assistant    encode("<|assistant|>\n")                           loss off
//                           encode(content), then eod()                         loss on
//   plain    prompt/response without headers: system and user contents encoded as they are
//            (loss off), the assistant's content encoded on its own then eod() (loss on).
//   llama2   Hugging Face's Llama-2-chat template: for each user turn
//              bos() "[INST] " + content.strip() + " [/INST]"  (the first user turn carries the
//              system prompt as "<<SYS>>\n" + system + "\n<</SYS>>\n\n" before its content)
//            and for each assistant turn " " + content.strip() + " " then eos() (loss on).
//   llama3   Llama-3-instruct: bos() once, then per message
//              <|start_header_id|> ROLE <|end_header_id|> "\n\n" + content.strip() <|eot_id|>
//            (loss on: the assistant's content and its <|eot_id|>).
//   chatml   ChatML (Qwen): per message <|im_start|> ROLE "\n" + content <|im_end|> "\n"
//            (loss on: the assistant's content and its <|im_end|>; not the "\n" after it).
//   qwen3    Qwen3's ChatML with thinking: an assistant turn after the last user message that is
//            the last turn (or has reasoning) opens with <think> "\n" + reasoning + "\n" </think>
//            "\n\n" before its content (reasoning: what an answer holds between <think> and
//            </think>, removed from earlier turns); loss on from <think> to <|im_end|>.
//   gemma    Gemma 2/3: bos() then per message <start_of_turn> ROLE "\n" + content.strip()
//            <end_of_turn> "\n", ROLE user or model; a system message becomes the prefix
//            system + "\n\n" of the first user turn; roles alternate user/assistant (loss on:
//            the answer and its <end_of_turn>).
//   phi3     Phi-3: per message <|ROLE|> "\n" + content <|end|> "\n", then eos() (loss on: the
//            answer and its <|end|>).
//
// The llama2/llama3/chatml/qwen3/gemma/phi3 ids are those of transformers' apply_chat_template with
// these templates (tokenize=True): the special tokens (<|im_start|>, ...) must each be one token of
// the tokenizer, and the text between two special tokens is encoded in one piece. The loss boundary
// inside such a piece (before an assistant's content) must fall between tokens: encoding the
// piece whole must give the concatenation of its parts' ids, else the conversation is an
// InputError (its assistant span cannot be delimited) rather than a guessed mask.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace megatron::data {

struct SFTMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatTemplate { Simple, Plain, Llama2, Llama3, ChatML, Qwen3, Gemma, Phi3 };

// "simple", "plain", "llama2", "llama3", "chatml", "qwen3", "gemma", "phi3"; InputError naming
// the others.
ChatTemplate chat_template_from_name(std::string_view name);
std::string_view chat_template_name(ChatTemplate t);

// Appends the conversation's tokens and loss flags. InputError when the template cannot express
// the conversation (llama2: roles not alternating user/assistant after an optional system
// message), a special token is not a single token of `tokenizer`, or an assistant span cannot be
// delimited (see above).
void tokenize_conversation(ChatTemplate chat_template, std::span<const SFTMessage> messages,
                           const Tokenizer& tokenizer, std::vector<int32_t>& tokens,
                           std::vector<uint8_t>& loss);

// What a model is given to answer `messages` (which end with a user message): the conversation
// followed by the opening of the assistant's turn (apply_chat_template's add_generation_prompt),
// i.e. the ids of messages + an empty assistant answer up to its first trained token. end_of_turn
// receives the token that closes an answer (eod, eos, <|eot_id|> or <|im_end|>): where to stop.
std::vector<int32_t> generation_prompt(ChatTemplate chat_template,
                                       std::span<const SFTMessage> messages,
                                       const Tokenizer& tokenizer, int32_t& end_of_turn);

}  // namespace megatron::data
