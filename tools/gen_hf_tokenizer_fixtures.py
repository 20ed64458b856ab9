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
    tests/fixtures/hf_tokenizers/tekken_style/tokenizer.json  likewise with Mistral-NeMo's (tekken)
                                                          Split regex (words split at case
                                                          changes, single digits), <s> / </s> /
                                                          [INST] / [/INST] and a <s> template
    tests/fixtures/hf_tokenizers/normalizers_style/tokenizer.json  LLaMA-3's regex after the
                                                          normalizer Sequence[Sequence[NFKC,
                                                          Lowercase], Replace x2, Strip(left),
                                                          Prepend(" ")], an added token matched
                                                          normalized ([MASK]) and one raw
    tests/fixtures/hf_tokenizers/accents_style/tokenizer.json  GPT-2's ByteLevel regex after
                                                          Sequence[NFD, StripAccents, NFKD,
                                                          Replace, Strip(right)]
    tests/fixtures/hf_tokenizers/metaspace_style/tokenizer.json  SentencePiece-style BPE over
                                                          characters (1200 merges-trained tokens on
                                                          an 80-character alphabet + the 256
                                                          <0xXX> byte tokens): Metaspace(first,
                                                          no split), byte_fallback, a <s> template
    tests/fixtures/hf_tokenizers/llama2_style/tokenizer.json  the same model with LLaMA-2's
                                                          Prepend + Replace normalizer and no
                                                          pre-tokenizer, <start_of_turn> (rstrip)
                                                          and <end_of_turn> (lstrip)
    tests/fixtures/hf_tokenizers/metaspace_unk_style/tokenizer.json  Metaspace(always, split), a
                                                          fused <unk> instead of byte fallback
    tests/fixtures/hf_tokenizers/expected.jsonl           {"tokenizer", "text", "ids",
                                                          "ids_with_special"} per text
    tests/fixtures/hf_tokenizers/corpus_digests.jsonl     {"tokenizer", "file", "doc", "count",
                                                          "fnv1a64"} for every document of
                                                          data/corpus (ids without special
                                                          tokens; FNV-1a over their int32 LE bytes)

The texts are the first documents of data/corpus (whole, so every line shape occurs) plus
edge cases (numbers, contractions in any case, runs of spaces and newlines, non-ASCII,
special tokens written in the text). The tokenizers added later (tekken_style, normalizers_style,
accents_style, then the SentencePiece-style three with SP_EDGE_CASES) come after the first three
in both .jsonl files, so those stay as they were; their
texts are the first 1500 characters of the same documents (the digests cover whole documents),
the same edge cases and NEW_EDGE_CASES (letter case classes, marks, digits, '/', compatibility
characters, accents, whitespace to strip, their added tokens). Run once from the repository
root; the outputs are committed and neither the build nor the tests run Python:

    python3 -m venv /tmp/hf-venv && /tmp/hf-venv/bin/pip install tokenizers
    /tmp/hf-venv/bin/python tools/gen_hf_tokenizer_fixtures.py

Made with tokenizers 0.23.3.
"""
import json
import sys
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
# Mistral-NeMo's tokenizer.json (the pattern transformers' fix_mistral_regex also installs).
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

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

# Only for the tokenizers added later (the first three's expected ids stay as they were).
NEW_EDGE_CASES = [
    # Title case (Lt), upper-case runs before and after lower case, camel case.
    "\u01c5ungla \u01c8ubljana \u01cbego\u0161 \u1f88 \u01c5\u01c5 a\u01c5b Title TITLE tItLe",
    "HELLO World NASA's iPhone McDonald camelCaseWord XMLHttpRequest ABCdef \u00c9COLE "
    "\u00dcn\u00efcode \u0391\u0398\u0397\u039d\u0391 \u0391\u03b8\u03ae\u03bd\u03b1 "
    "OpenAI's GPT-4o: 'TEST' it's A1B2C3 x_y_z __init__ fooBar123Baz",
    # Combining marks (Mn, Mc, Me) after, before and between letters; scripts built on them.
    "e\u0301 E\u0301COLE A\u0301BC a\u0300\u0301 \u0301\u0302start x\u20dd \u0301A end\u0301 "
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 "
    "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629",
    # Modifier letters (Lm) and other letters (Lo).
    "\u02b0\u02b2 \u02c8stress \u30fc \u30ab\u30bf\u30ab\u30ca\u30fc \u017f \ua730 "
    "\u65e5\u672cABC\u8a9e",
    # Digits and other numbers.
    "1234 \u0661\u0662\u0663 \uff15\uff16\uff17 \u00bd \u216b x\u00b2 3.14 2024/11/24",
    # '/' after punctuation, line breaks after punctuation.
    "a/b //x .../\n/ ?/ http://example.com/path/ ./\n\n/ !!//\r\n/ / / ;\r\n\r\n/x",
    # Compatibility characters for NFKC / NFKD: full-width, half-width, ligatures, circled.
    "\uff28\uff45\uff4c\uff4c\uff4f\u3000\uff37\uff4f\uff52\uff4c\uff44\uff01 "
    "\uff76\uff80\uff76\uff85 \ufb01\ufb02 \u2460 \u338f \u00b2\u00b3 \u210c \u2122 "
    "\u01c4\u01c5\u01c6\u01c7 \u0149 \ufdfa \u1e9b\u0323",
    # Accents for StripAccents, precomposed and decomposed, and Hangul.
    "Cr\u00e8me br\u00fbl\u00e9e, na\u00efve caf\u00e9, \u00c5ngstr\u00f6m, \u0110\u1eb7ng "
    "Vi\u1ec7t, \ufb01anc\u00e9, \u1e14, cafe\u0301, \ud55c\uad6d\uc5b4",
    # Lowercase: special mappings, no final-sigma rule, Kelvin / Ohm / Angstrom signs.
    "\u0130stanbul \u03a3\u039f\u03a6\u039f\u03a3 \u038c\u03a3\u039f\u03a3 \u03a3 "
    "\u1e9e \u2126 \u212a \u212b \u0390",
    # Whitespace for Strip, at both ends.
    "   leading and trailing   ", "\u3000\u2003 unicode spaces \u00a0", "\t\n  \n",
    # Replace's patterns.
    "``quoted'' -- dashes__under_scored__ -- end--",
    # Added tokens between (and inside) normalized pieces.
    "<s>[INST] Hi there [/INST]Okay</s>",
    "<|endoftext|>[MASK] x [MASK] [mask]y @@Raw@@ @@raw@@  <|endoftext|>  Naive naive NAIVE "
    "<|endoftext|>",
]


# For the SentencePiece-style tokenizers (and the later ones): leading and repeated spaces
# around added tokens, characters outside the 80-character alphabet (byte fallback / <unk>),
# a literal U+2581, text that spells a byte token.
SP_EDGE_CASES = [
    " leading", "  two leading", "<start_of_turn>user\nHi there<end_of_turn>\n",
    "x<start_of_turn> spaced <end_of_turn>  y", "<s>Hello</s> world", "\u2581already\u2581meta",
    "<0x41> is not a byte token in text", "\u00e7a \u20ac\u00a5 \u2603\u2603 \U0001F600!",
    "Qu\u00e9bec \u4e2d\u6587\u5b57 \u0416\u0416\u0416", "tabs\tand\nnewlines\n\n end",
]


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for b in b"".join(i.to_bytes(4, "little", signed=True) for i in ids):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def write_corpus_digests(path, tokenizers_by_name):
    """{"tokenizer", "file", "doc", "count", "fnv1a64"} for every document of data/corpus."""
    with open(path, "w") as out:
        for name, tok in tokenizers_by_name.items():
            for fname in ("austen.jsonl", "kjv.jsonl"):
                with open(os.path.join(ROOT, "data", "corpus", fname)) as f:
                    docs = [json.loads(line)["text"] for line in f]
                for i, enc in enumerate(tok.encode_batch(docs, add_special_tokens=False)):
                    out.write(json.dumps({"tokenizer": name, "file": fname, "doc": i,
                                          "count": len(enc.ids), "fnv1a64": fnv1a64(enc.ids)})
                              + "\n")


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


def tekken_style(training_texts):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TEKKEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000,
                                  special_tokens=["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_texts, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    return tok


def normalizers_style(training_texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([
        normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
        normalizers.Replace("--", " - "), normalizers.Replace("_", ""),
        normalizers.Strip(left=True, right=False), normalizers.Prepend(" ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_texts, trainer)
    # [MASK] is found in the normalized text as " [mask]"; @@Raw@@ only as written.
    tok.add_tokens([tokenizers.AddedToken("[MASK]", normalized=True),
                    tokenizers.AddedToken("@@Raw@@", normalized=False)])
    return tok


def accents_style(training_texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([
        normalizers.NFD(), normalizers.StripAccents(), normalizers.NFKD(),
        normalizers.Replace("\n\n", "\n"), normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_texts, trainer)
    tok.add_tokens([tokenizers.AddedToken("Naive", normalized=True)])
    return tok


def sentencepiece_style(training_texts, byte_fallback, unk_token):
    """A SentencePiece-style BPE (LLaMA-2 / Gemma / Phi-3 tokenizer.json): merges over characters
    learned on Metaspace words, an alphabet limited to 80 characters so that the rest falls back
    to the <0xXX> byte tokens of the vocabulary (not added tokens), or to a fused <unk>."""
    tok = Tokenizer(models.BPE(unk_token=unk_token, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=80)
    tok.train_from_iterator(training_texts, trainer)
    j = json.loads(tok.to_str())
    j["model"]["byte_fallback"] = byte_fallback
    if byte_fallback:
        vocab = j["model"]["vocab"]
        for b in range(256):
            vocab[f"<0x{b:02X}>"] = len(vocab)
    return Tokenizer.from_str(json.dumps(j))


def metaspace_style(training_texts):
    """transformers 5's conversion of a LLaMA SentencePiece model: Metaspace(first, no split),
    byte fallback, the Replace/ByteFallback/Fuse/Strip decoder, a <s> template."""
    tok = sentencepiece_style(training_texts, True, None)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                 split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def llama2_style(training_texts):
    """LLaMA-2's (and Phi-3's) hub tokenizer.json: no pre-tokenizer, the normalizer
    Sequence[Prepend("\u2581"), Replace(" ", "\u2581")], byte fallback."""
    tok = sentencepiece_style(training_texts, True, None)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    # Phi-3-like added tokens that take the whitespace after (rstrip) or before (lstrip) them.
    tok.add_special_tokens([tokenizers.AddedToken("<start_of_turn>", rstrip=True, special=True),
                            tokenizers.AddedToken("<end_of_turn>", lstrip=True, special=True)])
    return tok


def metaspace_unk_style(training_texts):
    """Metaspace(always, split) without byte fallback: unknown characters become one fused
    <unk>; Gemma's turn markers as added tokens; the Metaspace decoder."""
    tok = sentencepiece_style(training_texts, False, "<unk>")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
    return tok


def write_expected(out, name, tok, texts):
    for text in texts:
        out.write(json.dumps({"tokenizer": name, "text": text,
                              "ids": tok.encode(text, add_special_tokens=False).ids,
                              "ids_with_special": tok.encode(text).ids,
                              "decoded": tok.decode(tok.encode(text).ids,
                                                    skip_special_tokens=False)},
                             ensure_ascii=False) + "\n")


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
    new_tokenizers = {"tekken_style": tekken_style(training),
                      "normalizers_style": normalizers_style(training),
                      "accents_style": accents_style(training),
                      "metaspace_style": metaspace_style(training),
                      "llama2_style": llama2_style(training),
                      "metaspace_unk_style": metaspace_unk_style(training)}
    new_texts = [t[:1500] for t in corpus_texts()] + EDGE_CASES + NEW_EDGE_CASES + SP_EDGE_CASES
    with open(os.path.join(OUT, "expected.jsonl"), "w") as out:
        for name, tok in list(tokenizers_by_name.items()) + list(new_tokenizers.items()):
            d = os.path.join(OUT, name)
            os.makedirs(d, exist_ok=True)
            tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
            write_expected(out, name, tok, texts if name in tokenizers_by_name else new_texts)
            print(name, tok.get_vocab_size(), "tokens")
    tokenizers_by_name.update(new_tokenizers)
    write_corpus_digests(os.path.join(OUT, "corpus_digests.jsonl"), tokenizers_by_name)
    print("tokenizers", tokenizers.__version__)


# Added tokens that match whole words only (single_word: no word character, Rust regex's \w,
# right before or after the match; a discarded match stays text): GPT-2's byte-level BPE with
# "jqx" and "qz" (with lstrip) as single-word tokens and "<|x|>" as an ordinary one, none of them
# in its vocabulary (so a match shows in the ids).
SINGLE_WORD_TEXTS = [
    "tokenjqxing the jqx thing", "jqx", "jqx jqx", "qz_qz and qz", "(qz) [jqx]", "xjqx qzx",
    "qz1 1qz", "jqx\u00e9 qz", "na\u00efvejqx jqx", "jqx\u200dqz", "\u24b6jqx jqx\u24b6",
    "a-qz-b", "qz\nqz", "jqxqz jqx", "<|x|>jqx qz<|x|>", "\u00b2jqx \u0301jqx",
    "\u0661jqx jqx\u2160 \u203fqz", "jqx_", "_qz"]


def single_word_style():
    """tests/fixtures/hf_tokenizers/single_word_style and expected_single_word.jsonl (run with
    --single-word; the other fixtures stay as they are)."""
    gpt2_dir = os.path.join(ROOT, "tokenizers", "gpt2")
    tok = Tokenizer(models.BPE.from_file(os.path.join(gpt2_dir, "vocab.json"),
                                         os.path.join(gpt2_dir, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken("jqx", single_word=True, special=True),
                            tokenizers.AddedToken("qz", single_word=True, lstrip=True,
                                                  special=True),
                            tokenizers.AddedToken("<|x|>", special=True)])
    d = os.path.join(OUT, "single_word_style")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    with open(os.path.join(OUT, "expected_single_word.jsonl"), "w") as out:
        for text in SINGLE_WORD_TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            out.write(json.dumps({"text": text, "ids": ids,
                                  "decoded": tok.decode(ids, skip_special_tokens=False)}) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--single-word"]:
        single_word_style()
        sys.exit(0)
    main()
