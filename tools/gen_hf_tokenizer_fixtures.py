#!/usr/bin/env python3
"""Builds the Hugging Face tokenizer fixtures with the `tokenizers` library itself:

    tests/fixtures/hf_tokenizers/gpt2/tokenizer.json      GPT-2's byte-level BPE (the hub's
                                                          tokenizer.json layout) built by
                                                          `tokenizers` from tokenizers/gpt2/
                                                          {vocab.json, merges.txt}
    tests/fixtures/hf_tokenizers/llama3_style/tokenizer.json  a 1000-token byte-level BPE trained
                                                          here on the shipped corpus with
                                                          LLaMA-3's pre-tokenizer regex,
                                                          ignore_merges, <|begin_of_text|> /
                                                          <|end_of_text|> and its BOS template
    tests/fixtures/hf_tokenizers/qwen2_style/tokenizer.json   likewise with Qwen2's: the NFC normalizer,
                                                          its regex (single digits), <|endoftext|>,
                                                          <|im_start|>, <|im_end|>, no BOS
    tests/fixtures/hf_tokenizers/expected.jsonl           {"tokenizer", "text", "ids",
                                                          "ids_with_special"} per text
    tests/fixtures/hf_tokenizers/corpus_digests.jsonl     {"tokenizer", "file", "doc", "count",
                                                          "fnv1a64"} for every document of
                                                          data/corpus (ids without special
                                                          tokens; FNV-1a over their int32 LE bytes)

The texts are the first documents of data/corpus (whole, so every line shape occurs) plus
edge cases (numbers, contractions in any case, runs of spaces and newlines, non-ASCII,
special tokens written in the text). Run once from the repository root; the outputs are
committed and neither the build nor the tests run Python:

    python3 -m venv /tmp/hf-venv && /tmp/hf-venv/bin/pip install tokenizers
    /tmp/hf-venv/bin/python tools/gen_hf_tokenizer_fixtures.py

Made with tokenizers 0.23.3.
"""
import json
import os

import tokenizers
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "hf_tokenizers")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

EDGE_CASES = [
    "", " ", "  ", "\n", "\n\n\n", " \n ", "a  b   c", "trailing spaces   ", "\ttab\tseparated",
    "I'M HERE, you'RE there, it's, don't, they'll, we'd, I've",
    "12345 1234567 3.14159 2024-11-24 007",
    "caf\u00e9 na\u00efve \u00fcber \u0130stanbul \u65e5\u672c\u8a9e \U0001F600 emoji",
    "Mr. Knightley's \"quotes\" -- dashes... (parens) [brackets] {braces}",
    "line one\r\nline two\rline three\n\n  indented",
    "<|begin_of_text|>Hello<|end_of_text|> world <|endoftext|> after",
    "!!!???...,,,;;;", "\u00a0non-breaking\u2003em space\u3000ideographic",
    # NFC: decomposed accents compose, singletons map, Hangul jamo compose, blocked marks stay.
    "cafe\u0301 e\u0301te\u0301 A\u030a \u212b \u2126 \u1100\u1161\u11a8 \u1100\u1161 "
    "a\u0323\u0302 a\u0302\u0323 q\u0307\u0323 \u0301start <|im_start|>e\u0301<|im_end|>",
]


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for b in b"".join(i.to_bytes(4, "little", signed=True) for i in ids):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def corpus_texts(n_per_file=3):
    texts = []
    for name in ("austen.jsonl", "kjv.jsonl"):
        with open(os.path.join(ROOT, "data", "corpus", name)) as f:
            for i, line in enumerate(f):
                if i >= n_per_file:
                    break
                texts.append(json.loads(line)["text"])
    return texts


def llama3_style(training_texts):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_texts, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def qwen2_style(training_texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_texts, trainer)
    return tok


def main():
    gpt2_dir = os.path.join(ROOT, "tokenizers", "gpt2")
    # GPT-2's tokenizer.json as the hub ships it: byte-level BPE over the GPT-2 regex, the
    # <|endoftext|> added token, the byte-level decoder.
    gpt2 = Tokenizer(models.BPE.from_file(os.path.join(gpt2_dir, "vocab.json"),
                                          os.path.join(gpt2_dir, "merges.txt")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<|endoftext|>"])
    texts = corpus_texts() + EDGE_CASES
    training = []
    with open(os.path.join(ROOT, "data", "corpus", "austen.jsonl")) as f:
        training = [json.loads(line)["text"] for line in f][:40]
    tokenizers_by_name = {"gpt2": gpt2, "llama3_style": llama3_style(training),
                          "qwen2_style": qwen2_style(training)}
    with open(os.path.join(OUT, "expected.jsonl"), "w") as out:
        for name, tok in tokenizers_by_name.items():
            d = os.path.join(OUT, name)
            os.makedirs(d, exist_ok=True)
            tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
            for text in texts:
                out.write(json.dumps({"tokenizer": name, "text": text,
                                      "ids": tok.encode(text, add_special_tokens=False).ids,
                                      "ids_with_special": tok.encode(text).ids,
                                      "decoded": tok.decode(tok.encode(text).ids,
                                                            skip_special_tokens=False)},
                                     ensure_ascii=False) + "\n")
            print(name, tok.get_vocab_size(), "tokens")
    with open(os.path.join(OUT, "corpus_digests.jsonl"), "w") as out:
        for name, tok in tokenizers_by_name.items():
            for fname in ("austen.jsonl", "kjv.jsonl"):
                with open(os.path.join(ROOT, "data", "corpus", fname)) as f:
                    docs = [json.loads(line)["text"] for line in f]
                for i, enc in enumerate(tok.encode_batch(docs, add_special_tokens=False)):
                    out.write(json.dumps({"tokenizer": name, "file": fname, "doc": i,
                                          "count": len(enc.ids), "fnv1a64": fnv1a64(enc.ids)})
                              + "\n")
    print("tokenizers", tokenizers.__version__)


if __name__ == "__main__":
    main()
