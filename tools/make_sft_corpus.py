#!/usr/bin/env python3
"""Builds the instruction set of recipes/llama_tiny_sft.yaml from the shipped corpus
(data/corpus/*.jsonl, public domain): "which book is this passage from?" over Jane Austen's six
novels and the King James Bible (7 answers), as {"prompt", "response"} JSONL.

    python3 tools/make_sft_corpus.py            # writes data/finetune/book_id_{train,valid}.jsonl

Held out by chapter: every chapter whose index within its book is a multiple of 5 feeds only the
validation file, so validation passages come from chapters no training example saw (the
pretraining corpus holds every chapter: the task is telling the books apart, not recall). Each
book contributes the same number of examples (the Bible's chapters are sampled). Deterministic
(random.Random(seed)); standard library only.
"""
import argparse
import json
import os
import random
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AUSTEN_TITLES = {  # heading that opens a novel's first chapter -> answer
    "EMMA": "Emma",
    "MANSFIELD PARK": "Mansfield Park",
    "NORTHANGER ABBEY": "Northanger Abbey",
    "PERSUASION": "Persuasion",
    "PRIDE AND PREJUDICE": "Pride and Prejudice",
    "SENSE AND SENSIBILITY": "Sense and Sensibility",
}
BIBLE = "The King James Bible"

QUESTIONS = [
    "Which book is this passage from?",
    "Name the book this passage comes from.",
    "From which book is the following passage taken?",
]


def chapters():
    """(book, chapter index within the book, text) for every chapter of the corpus."""
    out = []
    book, index = None, 0
    with open(os.path.join(REPO, "data", "corpus", "austen.jsonl"), encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            head = text.lstrip().split("\n", 1)[0].strip().upper()
            if head in AUSTEN_TITLES:
                book, index = AUSTEN_TITLES[head], 0
            # Northanger Abbey's editorial note and advertisement are not the novel.
            if book is None or head.startswith(("A NOTE ON THE TEXT", "ADVERTISEMENT")):
                continue
            out.append((book, index, text))
            index += 1
    bible_index = 0
    with open(os.path.join(REPO, "data", "corpus", "kjv.jsonl"), encoding="utf-8") as f:
        for line in f:
            out.append((BIBLE, bible_index, json.loads(line)["text"]))
            bible_index += 1
    return out


def clean(text):
    # Verse numbers and chapter headings would give the Bible away; keep prose only.
    text = re.sub(r"^\s*\d+\s+", "", text, flags=re.M)
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def passage(text, rng, words):
    """About `words` words from a random sentence start of the chapter, or None."""
    body = clean(text)
    starts = [m.end() for m in re.finditer(r"[.!?;:] ", body)]
    if not starts:
        return None
    start = rng.choice(starts[: max(1, len(starts) - 4)])
    chunk = body[start:].split(" ")[:words]
    if len(chunk) < words // 2:
        return None
    return " ".join(chunk)


def build(chapter_list, per_book, rng, words):
    by_book = {}
    for book, index, text in chapter_list:
        by_book.setdefault(book, []).append(text)
    examples = []
    for book in sorted(by_book):
        texts = by_book[book]
        made = 0
        while made < per_book:
            p = passage(rng.choice(texts), rng, words)
            if p is None:
                continue
            q = rng.choice(QUESTIONS)
            examples.append({"prompt": f"{q}\n{p}", "response": book})
            made += 1
    rng.shuffle(examples)
    return examples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-per-book", type=int, default=300)
    ap.add_argument("--valid-per-book", type=int, default=30)
    ap.add_argument("--words", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "finetune"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    all_chapters = chapters()
    train = [c for c in all_chapters if c[1] % 5 != 0]
    valid = [c for c in all_chapters if c[1] % 5 == 0]
    os.makedirs(args.out, exist_ok=True)
    for name, subset, n in (("train", train, args.train_per_book),
                            ("valid", valid, args.valid_per_book)):
        path = os.path.join(args.out, f"book_id_{name}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for ex in build(subset, n, rng, args.words):
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
