#!/usr/bin/env python3
"""Builds tests/fixtures/hf_tokenizers_real: the released vocabularies of Phi-3, Qwen2/Qwen3,
Qwen3.5 and Gemma 4 as tokenizer.json files, with `tokenizers`' ids for them.

No hub is reachable from the machines this project is built on, but PyPI is, and the source
distribution of llama-cpp-python carries llama.cpp's vocabulary test files
(vendor/llama.cpp/models/ggml-vocab-NAME.gguf): the released tokenizers' tokens, scores, types
and merges, with NAME.gguf.inp (test texts) and NAME.gguf.out (the ids the released Hugging Face
tokenizer gave for them, written by llama.cpp's convert_hf_to_gguf_update.py with
AutoTokenizer). transformers' own GGUF converter (`integrations.gguf.convert_gguf_tokenizer`)
(what `from_pretrained(..., gguf_file=...)` runs) turns each vocabulary back into a tokenizer,
saved with save_pretrained; this script refuses to write a fixture unless it gives the released
tokenizer's ids on every .inp text. (The added tokens' lstrip/rstrip flags are not in a GGUF
file: they come out false.)

    NAME        released tokenizer (per llama.cpp's convert_hf_to_gguf_update.py)
    phi-3       microsoft/Phi-3-mini-4k-instruct: LLaMA-2's SentencePiece BPE layout
                (Prepend + Replace normalizer, byte fallback), 32064 tokens
    qwen2       Qwen/Qwen1.5-7B: the Qwen2 / Qwen3 byte-level BPE (151643 merges-built tokens,
                the Qwen2 regex); Qwen3's tokenizer.json differs only in its added tokens
    qwen35      Qwen3.5's: the same vocabulary, a regex with combining marks (\\p{M})
    gemma-4     google/gemma-4: Gemma's SentencePiece BPE (Replace normalizer, byte fallback),
                262144 tokens, 514906 merges (Gemma 3's vocabulary size)

Outputs (committed; neither the build nor the tests run Python):

    tokenizers.tar.xz      phi3/, qwen2/, qwen35/, gemma4/ each with the tokenizer.json and
                           tokenizer_config.json save_pretrained wrote (deterministic tar:
                           sorted, mtime 0); the build unpacks it into the build tree
    expected.jsonl         {"tokenizer", "text", "ids", "ids_with_special", "decoded",
                           "released"} (ids with special tokens as transformers' AutoTokenizer
                           gives them from the saved directory): llama.cpp's test texts (released = true: the ids are
                           the released tokenizer's, and `tokenizers` agrees), the first 1500
                           characters of the corpus's first documents and the edge cases of
                           tools/gen_hf_tokenizer_fixtures.py
    corpus_digests.jsonl   count and FNV-1a of the ids of every document of data/corpus

Run once from the repository root:

    python3 -m venv /tmp/hf-venv
    /tmp/hf-venv/bin/pip install tokenizers transformers gguf sentencepiece protobuf torch
    /tmp/hf-venv/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcp
    tar xzf /tmp/lcp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcp
    /tmp/hf-venv/bin/python tools/gen_real_tokenizer_fixtures.py \\
        /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/models

Made with tokenizers 0.23.3, transformers 5.24.0, gguf 0.19.0, llama-cpp-python 0.3.36.
"""
import io
import json
import lzma
import os
import sys
import shutil
import tarfile
import tempfile

import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer, GemmaTokenizer, Qwen2Tokenizer, TokenizersBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hf_tokenizer_fixtures import (EDGE_CASES, NEW_EDGE_CASES, ROOT,  # noqa: E402
                                       SP_EDGE_CASES, corpus_texts, write_corpus_digests)

OUT = os.path.join(ROOT, "tests", "fixtures", "hf_tokenizers_real")
# fixture name -> llama.cpp vocabulary name
VOCABS = {"phi3": "phi-3", "qwen2": "qwen2", "qwen35": "qwen35", "gemma4": "gemma-4"}
# llama.cpp vocabulary name -> the transformers class of its family. Phi-3's is the generic one
# (the pipeline as the file has it). So is Qwen3.5's here: transformers 5.24's Qwen3_5Tokenizer
# adds an NFC normalizer, and the released tokenizer does not normalize (llama.cpp's .out holds
# its ids for "e\u0301": e and the combining accent, two tokens).
CLASSES = {"phi-3": AutoTokenizer, "qwen2": Qwen2Tokenizer, "qwen35": TokenizersBackend,
           "gemma-4": GemmaTokenizer}


def released_cases(models_dir, vocab):
    """llama.cpp's test texts and the released tokenizer's ids for them."""
    base = os.path.join(models_dir, f"ggml-vocab-{vocab}.gguf")
    with open(base + ".inp", encoding="utf-8", newline="") as f:
        inp = f.read()
    sep = "\n__ggml_vocab_test__\n"
    texts = (inp[:-len(sep)] if inp.endswith(sep) else inp).split(sep)
    with open(base + ".out", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(texts):
        sys.exit(f"{base}.out: {len(lines)} lines for {len(texts)} texts")
    return [(t, [int(x) for x in lines[i].split()]) for i, t in enumerate(texts)]


def build(models_dir, vocab, staging):
    """transformers' GGUF conversion of one vocabulary, saved with save_pretrained, loaded again
    with the family's tokenizer class (whose constructor sets the pipeline as for the released
    files: Qwen's NFC normalizer and regex) and saved once more: (the `tokenizers` tokenizer of
    that tokenizer.json, the transformers tokenizer loaded from it, the directory). Gemma 4's
    GGUF carries a per-layer model config that AutoTokenizer's config reader refuses, so every
    family's class is named directly."""
    cls = CLASSES[vocab]
    first, out = os.path.join(staging, vocab + "-gguf"), os.path.join(staging, vocab)
    cls.from_pretrained(models_dir, gguf_file=f"ggml-vocab-{vocab}.gguf").save_pretrained(first)
    cls.from_pretrained(first).save_pretrained(out)
    return Tokenizer.from_file(os.path.join(out, "tokenizer.json")), cls.from_pretrained(out), out


def write_expected(out, name, tok, hf_tok, cases):
    """ids: `tokenizers` without special tokens (the same as transformers'); ids_with_special:
    transformers' default encoding (tokenizer_config.json's add_bos_token rebuilds the
    template); decoded: `tokenizers`' decoding of those."""
    for text, released in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        if hf_tok.encode(text, add_special_tokens=False) != ids:
            sys.exit(f"{name}: transformers and tokenizers disagree on {text!r}")
        with_special = hf_tok.encode(text)
        row = {"tokenizer": name, "text": text, "ids": ids, "ids_with_special": with_special,
               "decoded": tok.decode(with_special, skip_special_tokens=False),
               "released": released is not None}
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def add_file(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main(models_dir):
    os.makedirs(OUT, exist_ok=True)
    staging = tempfile.mkdtemp()
    texts = [t[:1500] for t in corpus_texts()] + EDGE_CASES + NEW_EDGE_CASES + SP_EDGE_CASES
    built = {}
    with open(os.path.join(OUT, "expected.jsonl"), "w", encoding="utf-8") as out:
        for name, vocab in VOCABS.items():
            tok, hf_tok, saved = build(models_dir, vocab, staging)
            cases = released_cases(models_dir, vocab)
            for text, want in cases:
                got = tok.encode(text, add_special_tokens=False).ids
                if got != want:
                    sys.exit(f"{vocab}: transformers' conversion gives {got} for {text!r}; "
                             f"the released tokenizer gave {want}")
            write_expected(out, name, tok, hf_tok, cases + [(t, None) for t in texts])
            built[name] = (tok, saved)
            print(name, tok.get_vocab_size(), "tokens,", len(cases), "released cases agree")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(built):
            for file in ("tokenizer.json", "tokenizer_config.json"):
                with open(os.path.join(built[name][1], file), "rb") as f:
                    add_file(tar, f"{name}/{file}", f.read())
    with open(os.path.join(OUT, "tokenizers.tar.xz"), "wb") as f:
        f.write(lzma.compress(raw.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    write_corpus_digests(os.path.join(OUT, "corpus_digests.jsonl"),
                         {name: tok for name, (tok, _) in built.items()})
    shutil.rmtree(staging)
    print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
