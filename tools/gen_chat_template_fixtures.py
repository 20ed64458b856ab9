#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates: what Hugging Face transformers' apply_chat_template
makes of a set of conversations under the llama2, llama3, chatml, qwen3, gemma and phi3 templates
of data/chat_template.h (their Jinja text in templates.json), with the assistant mask transformers computes from {% generation %}
blocks, and the generation prompt (add_generation_prompt) of each conversation's last question.

Run by hand (needs transformers and tokenizers; the build and the tests do not):
    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install transformers tokenizers jinja2
    /tmp/hfvenv/bin/python tools/gen_chat_template_fixtures.py

Tokenizers: the small byte-level BPE fixtures of tests/fixtures/hf_tokenizers (made by
tools/gen_hf_tokenizer_fixtures.py) with the template's special tokens added, saved beside the
expectations (tokenizer.json + tokenizer_config.json) so the C++ test loads the same files.
The templates are those of meta-llama/Llama-2-7b-chat-hf, meta-llama/Meta-Llama-3-8B-Instruct and
plain ChatML (Qwen's without its default system prompt), with {% generation %} around what is
trained (the answer and the token closing it).
"""
import json
import os
import sys

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, "tests", "fixtures", "hf_tokenizers")
OUT = os.path.join(REPO, "tests", "fixtures", "chat_templates")

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{% generation %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endgeneration %}{% endif %}{% endfor %}")

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Qwen3's template (Qwen/Qwen3-8B's tokenizer_config.json, as remembered: no network here to fetch
# it; its tool-calling branches left out), with {% generation %} from <think> (or the answer) to
# <|im_end|>.
QWEN3 = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set content = message.content %}"
    "{%- set reasoning_content = '' %}{%- if '</think>' in message.content %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}{% generation %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
    "{{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n'"
    " + content.lstrip('\\n') }}{%- else %}{{- content }}{%- endif %}"
    "{{- '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

# Gemma 3's template (google/gemma-3-1b-it, as remembered; text content only), with
# {% generation %} around the answer and its <end_of_turn>.
GEMMA = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if role == 'model' -%}{% generation %}{{ message['content'] | trim }}"
    "{{ '<end_of_turn>' }}{% endgeneration %}{%- else -%}{{ message['content'] | trim }}"
    "{{ '<end_of_turn>' }}{%- endif -%}{{ '\\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")

# Phi-3's template (microsoft/Phi-3-mini-4k-instruct, as remembered), with {% generation %}
# around the answer and its <|end|>.
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' }}{% generation %}"
    "{{ message['content'] + '<|end|>' }}{% endgeneration %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")

# name: (template, source tokenizer, added special tokens, bos, eos)
SETUPS = {
    "llama2": (LLAMA2, "qwen2_style", ["<s>", "</s>"], "<s>", "</s>"),
    "llama3": (LLAMA3, "llama3_style",
               ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>"),
    "chatml": (CHATML, "qwen2_style", [], None, "<|im_end|>"),
    "qwen3": (QWEN3, "qwen2_style", ["<think>", "</think>"], None, "<|im_end|>"),
    "gemma": (GEMMA, "llama3_style", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
              "<bos>", "<eos>"),
    "phi3": (PHI3, "qwen2_style", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], None,
             "<|endoftext|>"),
}

# Qwen3's own: answers holding their reasoning between <think> and </think> (kept in the turn
# after the last user message, dropped before it).
QWEN3_CONVERSATIONS = [
    [{"role": "user", "content": "Is Emma married at the end?"},
     {"role": "assistant", "content": "<think>\nThe last chapter: the wedding.\n</think>\n\nYes."}],
    [{"role": "user", "content": "Name a Bennet sister."},
     {"role": "assistant", "content": "<think>Five of them.</think>Jane."},
     {"role": "user", "content": "Another?"},
     {"role": "assistant", "content": "<think>\n\nNot Jane.\n</think>\nLydia."}],
]

CONVERSATIONS = [
    [{"role": "user", "content": "Who is the heroine of Emma?"},
     {"role": "assistant", "content": "Emma Woodhouse."}],
    [{"role": "system", "content": "Answer briefly."},
     {"role": "user", "content": "Where does Mr. Knightley live?"},
     {"role": "assistant", "content": "At Donwell Abbey."},
     {"role": "user", "content": "  And Emma?  "},
     {"role": "assistant", "content": " At Hartfield, with her father.\n"}],
    [{"role": "user", "content": "In the beginning God created..."},
     {"role": "assistant", "content": "the heaven and the earth."},
     {"role": "user", "content": "Quote verse 3."},
     {"role": "assistant", "content": "And God said, Let there be light: and there was light."}],
    [{"role": "system", "content": "Tu réponds en français."},
     {"role": "user", "content": "Qui épouse Elizabeth Bennet ?"},
     {"role": "assistant", "content": "Fitzwilliam Darcy — à la fin du roman."}],
    [{"role": "user", "content": "Say nothing."},
     {"role": "assistant", "content": " ..."}],
    [{"role": "user", "content": "Count: 1, 2, 3"},
     {"role": "assistant", "content": "4, 5, 6!\tDone."}],
]


def make_tokenizer(source, added, bos, eos, out_dir):
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_file(os.path.join(SRC, source, "tokenizer.json")))
    if added:
        tok.add_special_tokens({"additional_special_tokens": added})
    if bos:
        tok.bos_token = bos
    tok.eos_token = eos
    os.makedirs(out_dir, exist_ok=True)
    tok.save_pretrained(out_dir)
    # Keep only what the C++ loader reads.
    for name in os.listdir(out_dir):
        if name not in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(out_dir, name))
    return tok


def main():
    lines = []
    for name, (template, source, added, bos, eos) in SETUPS.items():
        tok = make_tokenizer(source, added, bos, eos, os.path.join(OUT, name))
        conversations = CONVERSATIONS + (QWEN3_CONVERSATIONS if name == "qwen3" else [])
        for k, conv in enumerate(conversations):
            enc = tok.apply_chat_template(conv, chat_template=template, tokenize=True,
                                          return_dict=True, return_assistant_tokens_mask=True)
            ids = list(enc["input_ids"])
            mask = list(enc["assistant_masks"])
            # The plain call (no mask) must give the same ids.
            assert list(tok.apply_chat_template(conv, chat_template=template, tokenize=True,
                                                return_dict=True)["input_ids"]) == ids
            # The generation prompt (add_generation_prompt) of the conversation up to its last
            # user message.
            last_user = max(i for i, m in enumerate(conv) if m["role"] == "user")
            prompt = list(tok.apply_chat_template(conv[:last_user + 1], chat_template=template,
                                                  tokenize=True, add_generation_prompt=True,
                                                  return_dict=True)["input_ids"])
            lines.append({"template": name, "tokenizer": name, "conversation": k,
                          "messages": conv, "ids": ids, "assistant_mask": mask,
                          "generation_prompt": prompt})
    # The templates themselves: what an export writes as tokenizer_config.json's chat_template.
    with open(os.path.join(OUT, "templates.json"), "w", encoding="utf-8") as f:
        json.dump({name: setup[0] for name, setup in SETUPS.items()}, f, indent=2,
                  ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(OUT, "expected.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {len(lines)} expectations to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
