#!/usr/bin/env python3
"""Convert the plain-text corpus (Austen novels, King James Bible) into JSONL documents.

One document per chapter: {"text": "..."} per line, in the order of the source file.

    python3 tools/corpus_to_jsonl.py --format austen austen.txt data/corpus/austen.jsonl
    python3 tools/corpus_to_jsonl.py --format kjv    kjv.txt    data/corpus/kjv.jsonl

Splitting rules (derived from the texts themselves; see data/corpus/SOURCES.md):
  austen: a new document starts at a chapter heading ("CHAPTER XII", "CHAPTER 12",
          "Chapter 12") or at a front/back-matter heading (ADVERTISEMENT..., A NOTE ON THE TEXT: their own small
          documents). A book's title page (from its title line: EMMA, MANSFIELD PARK,
          NORTHANGER ABBEY, Persuasion, PRIDE AND PREJUDICE, SENSE AND SENSIBILITY) and a
          volume heading ("VOLUME II") are joined to the document after them, so a book's
          first chapter starts with its title page and a volume's first chapter with
          its volume heading. "THE END"/"FINIS" stay at the end of a book's last chapter.
  kjv:    a new document starts at each "<Book> <chapter>" heading ("Genesis 1",
          "1 Samuel 3", "Song of Solomon 8"); verse numbers are kept as in the source.
Text is kept verbatim except that leading/trailing blank lines of a document are dropped.
Only the Python standard library is used; the output is deterministic.
"""
import argparse
import json
import re
import sys

AUSTEN_TITLES = {"EMMA", "MANSFIELD PARK", "NORTHANGER ABBEY", "Persuasion",
                 "PRIDE AND PREJUDICE", "SENSE AND SENSIBILITY"}
AUSTEN_CHAPTER = re.compile(r"^(CHAPTER|Chapter) ([IVXLC]+|[0-9]+)\.?$")
AUSTEN_VOLUME = re.compile(r"^VOLUME [IVXLC]+$")
AUSTEN_MATTER = re.compile(r"^(ADVERTISEMENT BY THE AUTHORESS.*|A NOTE ON THE TEXT)$")
KJV_CHAPTER = re.compile(r"^([1-3] )?[A-Z][A-Za-z. ]+ [0-9]+$")


def austen_boundary(line):
    s = line.rstrip("\n")
    if AUSTEN_CHAPTER.match(s) or AUSTEN_MATTER.match(s):
        return "start"
    if s in AUSTEN_TITLES or AUSTEN_VOLUME.match(s):
        return "prefix"
    return None


def kjv_boundary(line):
    return "start" if KJV_CHAPTER.match(line.rstrip("\n")) else None


def split_documents(lines, boundary):
    # Segments: lists of lines; each boundary line opens a new segment.
    segments = [[]]
    kinds = [None]
    for line in lines:
        kind = boundary(line)
        if kind is not None:
            segments.append([])
            kinds.append(kind)
        segments[-1].append(line)
    docs = []
    pending = ""  # title pages / volume headings waiting for the segment after them
    for seg, kind in zip(segments, kinds):
        text = "".join(seg).strip("\n")
        if not text.strip():
            continue
        if kind == "prefix":
            pending += text + "\n\n"
            continue
        docs.append(pending + text)
        pending = ""
    if pending:
        docs.append(pending.strip("\n"))
    return docs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=["austen", "kjv"], required=True)
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        lines = f.readlines()
    boundary = austen_boundary if args.format == "austen" else kjv_boundary
    docs = split_documents(lines, boundary)
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    chars = sum(len(d) for d in docs)
    print(f"{args.output}: {len(docs)} documents, {chars} characters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
