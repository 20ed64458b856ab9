#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates: what Hugging Face transformers' apply_chat_template
makes of a set of conversations under the llama2, llama3 and chatml templates of
data/chat_template.h, with the assistant mask transformers computes from {% generation %} blocks.

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
    "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}")

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}")

# name: (template, source tokenizer, added special tokens, bos, eos)
SETUPS = {
    "llama2": (LLAMA2, "qwen2_style", ["<s>", "</s>"], "<s>", "</s>"),
    "llama3": (LLAMA3, "llama3_style",
               ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>"),
    "chatml": (CHATML, "qwen2_style", [], None, "<|im_end|>"),
}

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
        for k, conv in enumerate(CONVERSATIONS):
            enc = tok.apply_chat_template(conv, chat_template=template, tokenize=True,
                                          return_dict=True, return_assistant_tokens_mask=True)
            ids = list(enc["input_ids"])
            mask = list(enc["assistant_masks"])
            # The plain call (no mask) must give the same ids.
            assert list(tok.apply_chat_template(conv, chat_template=template, tokenize=True,
                                                return_dict=True)["input_ids"]) == ids
            lines.append({"template": name, "tokenizer": name, "conversation": k,
                          "messages": conv, "ids": ids, "assistant_mask": mask})
    with open(os.path.join(OUT, "expected.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {len(lines)} expectations to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
