#!/usr/bin/env python3
"""Generates the expected ids of the GPT-2 and BERT tokenizer tests:

    tests/fixtures/gpt2_expected.jsonl   {"text" | "hex", "ids"}
    tests/fixtures/bert_expected.jsonl   {"text" | "hex", "uncased", "cased", "decoded_uncased"}

Run once from the repository root (the outputs are committed; neither the build nor the tests
run Python):

    pip install regex          # only for this script
    python3 tools/gen_tokenizer_fixtures.py

Both references are small pure-Python reimplementations written for this repository:
  GPT-2: the behaviour of OpenAI's encoder.py / Megatron's GPT2Tokenizer (bytes_to_unicode,
         the pre-tokenization regex through the `regex` module, rank-ordered BPE, no special
         handling of "<|endoftext|>"). A "hex" entry is raw bytes that are not valid UTF-8; the
         expectation is the reference applied to bytes.decode("utf-8", errors="replace").
  BERT:  Megatron's bert_tokenization.FullTokenizer (google-research BERT's BasicTokenizer with
         Python's unicodedata, WordPiece with max_input_chars_per_word = 200), on the shipped
         bert-base-uncased vocab; "cased" is do_lower_case=False on the same vocabulary.
         "hex" entries are decoded with errors="ignore" (BERT's convert_to_unicode).

The C++ tables come from tools/gen_unicode_tables.py; this script checks that the Python
running it has the same Unicode version, and that every fixture text only uses code points
whose \\p{L} / \\p{N} / \\s membership in the `regex` module (which may carry a newer Unicode)
agrees with unicodedata's.
"""
import json
import random
import re as stdre
import sys
import unicodedata

import regex

GPT2_VOCAB = "tokenizers/gpt2/vocab.json"
GPT2_MERGES = "tokenizers/gpt2/merges.txt"
BERT_VOCAB = "tokenizers/bert-base-uncased/vocab.txt"
CORPUS = ["data/corpus/austen.jsonl", "data/corpus/kjv.jsonl"]


# ---- GPT-2 reference ------------------------------------------------------------------------

GPT2_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def gpt2_byte_chars():
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


class Gpt2Reference:
    def __init__(self):
        with open(GPT2_VOCAB, encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(GPT2_MERGES, encoding="utf-8") as f:
            lines = f.read().split("\n")[1:-1]
        self.ranks = {}
        for rank, line in enumerate(lines):
            self.ranks[tuple(line.split())] = rank
        self.byte_chars = gpt2_byte_chars()

    def bpe(self, symbols):
        word = list(symbols)
        while len(word) > 1:
            ranked = [(self.ranks[p], p) for p in zip(word, word[1:]) if p in self.ranks]
            if not ranked:
                break
            _, (left, right) = min(ranked)
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == left and word[i + 1] == right:
                    merged.append(left + right)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text):
        ids = []
        for piece in GPT2_PATTERN.findall(text):
            symbols = "".join(self.byte_chars[b] for b in piece.encode("utf-8"))
            ids.extend(self.vocab[s] for s in self.bpe(symbols))
        return ids

    def decode(self, ids):
        inverse = {v: k for k, v in self.vocab.items()}
        to_byte = {c: b for b, c in self.byte_chars.items()}
        return bytes(to_byte[c] for i in ids for c in inverse[i]).decode("utf-8", "replace")


# ---- BERT reference -------------------------------------------------------------------------

def bert_is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def bert_is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def bert_is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def bert_is_cjk(ch):
    return any(a <= ord(ch) <= b for a, b in CJK_RANGES)


class BertReference:
    MAX_CHARS = 200  # Megatron's WordpieceTokenizer default (google-research BERT: 100)

    def __init__(self, lower):
        self.lower = lower
        self.vocab, self.tokens = {}, []
        with open(BERT_VOCAB, encoding="utf-8") as f:
            for line in f:
                token = line.strip()
                self.vocab[token] = len(self.tokens)
                self.tokens.append(token)

    def basic(self, text):
        cleaned = []
        for ch in text:
            if ord(ch) in (0, 0xFFFD) or bert_is_control(ch):
                continue
            if bert_is_whitespace(ch):
                cleaned.append(" ")
            elif bert_is_cjk(ch):
                cleaned += [" ", ch, " "]
            else:
                cleaned.append(ch)
        pieces = []
        for word in "".join(cleaned).split():
            if self.lower:
                word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                               if unicodedata.category(c) != "Mn")
            current = None
            for ch in word:
                if bert_is_punctuation(ch):
                    if current is not None:
                        pieces.append(current)
                        current = None
                    pieces.append(ch)
                else:
                    current = ch if current is None else current + ch
            if current is not None:
                pieces.append(current)
        return " ".join(pieces).split()

    def wordpiece(self, word):
        if len(word) > self.MAX_CHARS:
            return ["[UNK]"]
        out, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = ("##" if start > 0 else "") + word[start:end]
                if piece in self.vocab:
                    out.append(piece)
                    start = end
                    break
            else:
                return ["[UNK]"]
        return out

    def encode(self, text):
        return [self.vocab[p] for w in self.basic(text) for p in self.wordpiece(w)]

    def decode(self, ids):
        text = " ".join(self.tokens[i] for i in ids).replace(" ##", "").strip()
        for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                     (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                     (" 're", "'re")]:
            text = text.replace(a, b)
        return text


# ---- inputs ---------------------------------------------------------------------------------

HANDWRITTEN = [
    # known ids and the end-of-text string (plain text for the encoder)
    "Hello world", " Hello world", "<|endoftext|>", "Hello<|endoftext|>world", "",
    # contractions (lower case only; GPT-2 has no IGNORECASE)
    "I'm you're we've they'll she'd it's don't",
    "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T",
    "'s 't 're 've 'm 'll 'd", "''s", "x's", " 's", "rock'n'roll", "'S'T'RE", "'", "''", "'x",
    "don\u2019t curly apostrophe", "O'Neil's 'quoted' words'",
    # whitespace runs: \s+(?!\S) and \s+
    "a  b", "a   b", "a\tb", "a \t b", "a\n\nb", "trailing   ", "  leading", "\n", "   ", " ",
    "a\u00a0b", "a \u00a0b", "line1\r\nline2\r\n", "\u3000x", "x\u2028y", "  \n  x", "a \n",
    "tab\t\tthen  two\n\n\nthree\n", "\t x", "x \t", "\x0b\x0c vertical tab form feed",
    "ends with newline\n", "\u2003em space\u2009thin",
    # numbers
    "1234567890", "3.14159", "1,000,000", "v1.2.3", "\u0663\u0664\u0665 Arabic-Indic",
    "\u00b2\u00b3 superscripts", "\u216b roman numeral", "\u00bd half", "x2y3", " 42 ",
    # punctuation
    "Hello!!! ... ??? ---", "a--b", "(parens) [brackets] {braces}", "@#$%^&*", "\"quoted\"",
    "http://example.com/path?q=1&r=2", "!!!", " !!!", "a...b", "\u2014 em dash \u2026",
    "<html><body>text</body></html>", "C++ and C#", "e-mail: a.b@c.org",
    # letters of many scripts
    "na\u00efve caf\u00e9", "\u00dcberma\u00df", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u4e2d\u6587\u6d4b\u8bd5", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3",
    "\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442",
    "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "emoji \U0001f642\U0001f44d\U0001f3fd family \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e\u0301 combining a\u0308o\u0308", "\u0000 nul \u0001 ctrl \u007f del", "\ufffd",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522", "\ufb01 ligature",
    "\u0130stanbul \u0131", "\u1e9e capital sharp s", "I\u0307", "\u00ad soft hyphen",
    "zero\u200bwidth", "\u2028\u2029", "\U0010ffff \U000e0041",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8abc", "\u4e2d\u6587English\u6df7\u5408",
    "\u03a3\u0391\u03a3 \u039f\u0394\u039f\u03a3 \u03a3 \u039f\u0394\u039f\u03a3. A\u03a3'",
    "Hello, World!", "UNwant\u00e9d,running", "H\u00e9ll\u00f2 h\u00f4w are \u00fc?",
    "\tHeLLo!how  \n Are yoU?  ", "[CLS] [SEP] [MASK] [UNK] [PAD]", "unaffable",
    "The quick brown fox jumps over the lazy dog.",
    "Mr. and Mrs. Dashwood's 2nd visit -- 'twas 10:30pm; \"Yes!\" (they said).",
]

INVALID = [b"abc\xffdef", b"\xc3", b"\xe2\x82", b"\xe2\x82x", b"\xed\xa0\x80", b"\xc0\x80",
           b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"\xf4\x90\x80\x80", b"caf\xe9 au lait",
           b"\x80\x80 x", b"ok \xf8\x88\x80\x80\x80 five", b"\xe0\x80\xaf", b"\xef\xbf\xbf",
           b"mixed \xc3\xa9\xc3 \xe2\x82\xac\xe2"]


def long_inputs():
    rng = random.Random(1234)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ["a" * 500, "=" * 200, " " * 100 + "x", "1" * 200, "\n" * 50 + "x", "ab" * 150,
           "".join(rng.choice(letters) for _ in range(300)),
           "".join(rng.choice(letters) for _ in range(1200)),
           "".join(rng.choice("\u00e9\u00e0\u00fc\u00df\u0101\u4e00\u4e8c\u3042\u0430\u03b1")
                   for _ in range(400)),
           "".join(rng.choice(letters + "     ,.!?'\n\t0123456789\u00e9\U0001f642")
                   for _ in range(3000)),
           "supercalifragilistic" * 12]
    return out


def corpus_inputs():
    """Single lines, multi-line chunks and two short whole documents of the shipped corpus."""
    out = []
    for path in CORPUS:
        docs = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
        lines = [ln for d in docs for ln in d.split("\n") if ln.strip()]
        step = max(1, len(lines) // 150)
        out += lines[::step][:150]
        for k in range(6):
            d = docs[(k * 37) % len(docs)]
            parts = d.split("\n")
            start = (k * 11) % max(1, len(parts) - 20)
            out.append("\n".join(parts[start:start + 20]))
        out.append(min(docs, key=len))
    return out


def check_unicode_agreement(texts):
    """Code points where the regex module's classes differ from unicodedata's (newer Unicode)."""
    bad = set()
    for t in texts:
        for ch in set(t):
            cat = unicodedata.category(ch)
            if (bool(regex.match(r"\p{L}", ch)) != cat.startswith("L") or
                    bool(regex.match(r"\p{N}", ch)) != cat.startswith("N") or
                    bool(regex.match(r"\s", ch)) != (ch.isspace() and not "\x1c" <= ch <= "\x1f")):
                bad.add(hex(ord(ch)))
    if bad:
        sys.exit("fixture texts use code points classified differently by regex and "
                 "unicodedata %s: %s" % (unicodedata.unidata_version, sorted(bad)))


def main():
    header = open("data/unicode_tables.h", encoding="utf-8").read()
    version = stdre.search(r'kUnicodeVersion = "([^"]+)"', header).group(1)
    if version != unicodedata.unidata_version:
        sys.exit("this Python has Unicode %s, data/unicode_tables.h %s" %
                 (unicodedata.unidata_version, version))
    texts = HANDWRITTEN + long_inputs() + corpus_inputs()
    check_unicode_agreement(texts)

    gpt2 = Gpt2Reference()
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" Hello world") == [18435, 995]
    with open("tests/fixtures/gpt2_expected.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            ids = gpt2.encode(t)
            assert gpt2.decode(ids) == t
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")
        for raw in INVALID:
            ids = gpt2.encode(raw.decode("utf-8", "replace"))
            f.write(json.dumps({"hex": raw.hex(), "ids": ids}) + "\n")

    uncased, cased = BertReference(True), BertReference(False)
    with open("tests/fixtures/bert_expected.jsonl", "w", encoding="utf-8") as f:
        entries = [("text", t, t) for t in texts] + \
                  [("hex", raw.hex(), raw.decode("utf-8", "ignore")) for raw in INVALID]
        for field, value, text in entries:
            u = uncased.encode(text)
            f.write(json.dumps({field: value, "uncased": u, "cased": cased.encode(text),
                                "decoded_uncased": uncased.decode(u)}, ensure_ascii=False) + "\n")
    print("wrote %d GPT-2 and %d BERT cases (Unicode %s, regex %s)" %
          (len(texts) + len(INVALID), len(entries), version, regex.__version__))


if __name__ == "__main__":
    main()
