#include "data/chat_template_jinja.h"

namespace megatron::data {

namespace {

// The Jinja text of each template (Hugging Face's chat_template, with transformers'
// {% generation %} markers around the trained span). The same strings rendered
// tests/fixtures/chat_templates (tools/gen_chat_template_fixtures.py; templates.json holds them
// for the test that compares).
constexpr const char* kLlama2 =
    R"jinja({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{%)jinja"
    R"jinja( set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = )jinja"
    R"jinja(messages %}{% set system_message = false %}{% endif %}{% for message in loop_mes)jinja"
    R"jinja(sages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_e)jinja"
    R"jinja(xception('Conversation roles must alternate user/assistant/user/assistant/...') )jinja"
    R"jinja(}}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content)jinja"
    R"jinja( = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% els)jinja"
    R"jinja(e %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'u)jinja"
    R"jinja(ser' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message)jinja"
    R"jinja(['role'] == 'assistant' %}{% generation %}{{ ' '  + content.strip() + ' ' + eos_)jinja"
    R"jinja(token }}{% endgeneration %}{% endif %}{% endfor %})jinja";

constexpr const char* kLlama3 =
    R"jinja({{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message[')jinja"
    R"jinja(role'] + '<|end_header_id|>\n\n' }}{% if message['role'] == 'assistant' %}{% gen)jinja"
    R"jinja(eration %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}{% el)jinja"
    R"jinja(se %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}{% if )jinja"
    R"jinja(add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' })jinja"
    R"jinja(}{% endif %})jinja";

constexpr const char* kChatML =
    R"jinja({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}{% if )jinja"
    R"jinja(message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_e)jinja"
    R"jinja(nd|>' }}{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}{% e)jinja"
    R"jinja(ndif %}{{ '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assis)jinja"
    R"jinja(tant\n' }}{% endif %})jinja";

constexpr const char* kQwen3 =
    R"jinja({%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].c)jinja"
    R"jinja(ontent + '<|im_end|>\n' }}{%- endif %}{%- set ns = namespace(multi_step_tool=tru)jinja"
    R"jinja(e, last_query_index=messages|length - 1) %}{%- for message in messages[::-1] %}{)jinja"
    R"jinja(%- set index = (messages|length - 1) - loop.index0 %}{%- if ns.multi_step_tool a)jinja"
    R"jinja(nd message.role == 'user' %}{%- set ns.multi_step_tool = false %}{%- set ns.last)jinja"
    R"jinja(_query_index = index %}{%- endif %}{%- endfor %}{%- for message in messages %}{%)jinja"
    R"jinja(- if message.role == 'user' or (message.role == 'system' and not loop.first) %}{)jinja"
    R"jinja({- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' )jinja"
    R"jinja(}}{%- elif message.role == 'assistant' %}{%- set content = message.content %}{%-)jinja"
    R"jinja( set reasoning_content = '' %}{%- if '</think>' in message.content %}{%- set con)jinja"
    R"jinja(tent = message.content.split('</think>')[-1].lstrip('\n') %}{%- set reasoning_co)jinja"
    R"jinja(ntent = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].l)jinja"
    R"jinja(strip('\n') %}{%- endif %}{{- '<|im_start|>' + message.role + '\n' }}{% generati)jinja"
    R"jinja(on %}{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_conten)jinja"
    R"jinja(t) %}{{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + conten)jinja"
    R"jinja(t.lstrip('\n') }}{%- else %}{{- content }}{%- endif %}{{- '<|im_end|>' }}{% endg)jinja"
    R"jinja(eneration %}{{- '\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{)jinja"
    R"jinja({- '<|im_start|>assistant\n' }}{%- endif %})jinja";

constexpr const char* kGemma =
    R"jinja({{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_pref)jinja"
    R"jinja(ix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%})jinja"
    R"jinja({%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -)jinja"
    R"jinja(%}{%- endif -%}{%- for message in loop_messages -%}{%- if (message['role'] == 'u)jinja"
    R"jinja(ser') != (loop.index0 % 2 == 0) -%}{{ raise_exception('Conversation roles must a)jinja"
    R"jinja(lternate user/assistant/user/assistant/...') }}{%- endif -%}{%- if (message['rol)jinja"
    R"jinja(e'] == 'assistant') -%}{%- set role = 'model' -%}{%- else -%}{%- set role = mess)jinja"
    R"jinja(age['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_pre)jinja"
    R"jinja(fix if loop.first else '') }}{%- if role == 'model' -%}{% generation %}{{ messag)jinja"
    R"jinja(e['content'] | trim }}{{ '<end_of_turn>' }}{% endgeneration %}{%- else -%}{{ mes)jinja"
    R"jinja(sage['content'] | trim }}{{ '<end_of_turn>' }}{%- endif -%}{{ '\n' }}{%- endfor )jinja"
    R"jinja(-%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%})jinja";

constexpr const char* kPhi3 =
    R"jinja({% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\)jinja"
    R"jinja(n' + message['content'] + '<|end|>\n' }}{% elif message['role'] == 'user' %}{{ ')jinja"
    R"jinja(<|user|>\n' + message['content'] + '<|end|>\n' }}{% elif message['role'] == 'ass)jinja"
    R"jinja(istant' %}{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + '<|end|)jinja"
    R"jinja(>' }}{% endgeneration %}{{ '\n' }}{% endif %}{% endfor %}{% if add_generation_pr)jinja"
    R"jinja(ompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %})jinja";

}  // namespace

std::string_view chat_template_jinja(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::Llama2:
      return kLlama2;
    case ChatTemplate::Llama3:
      return kLlama3;
    case ChatTemplate::ChatML:
      return kChatML;
    case ChatTemplate::Qwen3:
      return kQwen3;
    case ChatTemplate::Gemma:
      return kGemma;
    case ChatTemplate::Phi3:
      return kPhi3;
    default:
      return {};
  }
}

}  // namespace megatron::data
