#!/usr/bin/env bash
# Tokenizes the shipped corpus (data/corpus/*.jsonl) into data/cache:
#   corpus_text_document.{bin,idx}       SentencePiece 8k (tokenizers/corpus_spm_8k.model), one
#                                        document per line + EOD: gpt_tiny, llama_tiny
#   corpus_bert_text_sentence.{bin,idx}  BERT WordPiece uncased (tokenizers/bert-base-uncased),
#                                        split into sentences: bert_tiny
# Idempotent: an output is rebuilt only when an input (the JSONL files, its tokenizer file or
# the preprocess_data binary) is newer.
#
# usage: tools/prepare_corpus.sh [--force]
# env:   BUILD_DIR  build directory holding bin/preprocess_data (default: build)
#        OUT_DIR    output directory (default: data/cache)
#        WORKERS    tokenizer threads (default: 2)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build_dir="${BUILD_DIR:-build}"
out_dir="${OUT_DIR:-data/cache}"
workers="${WORKERS:-2}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "prepare_corpus.sh: unknown argument '$arg' (expected --force)" >&2; exit 2 ;;
  esac
done

bin="$build_dir/bin/preprocess_data"
shopt -s nullglob
inputs=(data/corpus/*.jsonl)
shopt -u nullglob

if [ ${#inputs[@]} -eq 0 ]; then
  echo "prepare_corpus.sh: no data/corpus/*.jsonl files found in $repo" >&2
  exit 1
fi
if [ ! -x "$bin" ]; then
  echo "prepare_corpus.sh: '$bin' not found; build it first (cmake --build $build_dir --target preprocess_data) or set BUILD_DIR" >&2
  exit 1
fi

# build NAME SUFFIX TOKENIZER_FILE PREPROCESS_ARGS...: writes $out_dir/NAME_SUFFIX.{bin,idx}.
build() {
  local name="$1" suffix="$2" tok_file="$3"
  shift 3
  local prefix="$out_dir/$name"
  local outputs=("${prefix}_${suffix}.bin" "${prefix}_${suffix}.idx")
  if [ ! -f "$tok_file" ]; then
    echo "prepare_corpus.sh: tokenizer file '$tok_file' is missing" >&2
    exit 1
  fi
  local up_to_date=1
  if [ "$force" -eq 1 ]; then
    up_to_date=0
  else
    for out in "${outputs[@]}"; do
      if [ ! -f "$out" ]; then up_to_date=0; break; fi
      for dep in "${inputs[@]}" "$tok_file" "$bin"; do
        if [ "$dep" -nt "$out" ]; then up_to_date=0; break 2; fi
      done
    done
  fi
  if [ "$up_to_date" -eq 1 ]; then
    echo "prepare_corpus.sh: ${prefix}_${suffix}.{bin,idx} is up to date"
    return
  fi
  mkdir -p "$out_dir"
  "$bin" --input "${inputs[@]}" --json-keys text --workers "$workers" --output-prefix "$prefix" "$@"
  echo "prepare_corpus.sh: wrote ${prefix}_${suffix}.{bin,idx}"
}

build corpus text_document tokenizers/corpus_spm_8k.model \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model tokenizers/corpus_spm_8k.model \
  --append-eod
build corpus_bert text_sentence tokenizers/bert-base-uncased/vocab.txt \
  --tokenizer-type BertWordPieceLowerCase --vocab-file tokenizers/bert-base-uncased/vocab.txt \
  --split-sentences
