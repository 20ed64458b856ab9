#!/usr/bin/env bash
# Builds data/cache/corpus_text_document.{bin,idx} from the shipped corpus
# (data/corpus/*.jsonl) with the shipped SentencePiece model (tokenizers/corpus_spm_8k.model).
# Idempotent: does nothing when both outputs are newer than every input (the JSONL files, the
# tokenizer model and the preprocess_data binary).
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
model="tokenizers/corpus_spm_8k.model"
prefix="$out_dir/corpus"
outputs=("${prefix}_text_document.bin" "${prefix}_text_document.idx")
shopt -s nullglob
inputs=(data/corpus/*.jsonl)
shopt -u nullglob

if [ ${#inputs[@]} -eq 0 ]; then
  echo "prepare_corpus.sh: no data/corpus/*.jsonl files found in $repo" >&2
  exit 1
fi
if [ ! -f "$model" ]; then
  echo "prepare_corpus.sh: tokenizer model '$model' is missing" >&2
  exit 1
fi
if [ ! -x "$bin" ]; then
  echo "prepare_corpus.sh: '$bin' not found; build it first (cmake --build $build_dir --target preprocess_data) or set BUILD_DIR" >&2
  exit 1
fi

up_to_date=1
if [ "$force" -eq 1 ]; then
  up_to_date=0
else
  for out in "${outputs[@]}"; do
    if [ ! -f "$out" ]; then up_to_date=0; break; fi
    for dep in "${inputs[@]}" "$model" "$bin"; do
      if [ "$dep" -nt "$out" ]; then up_to_date=0; break 2; fi
    done
  done
fi
if [ "$up_to_date" -eq 1 ]; then
  echo "prepare_corpus.sh: ${prefix}_text_document.{bin,idx} is up to date"
  exit 0
fi

mkdir -p "$out_dir"
"$bin" --input "${inputs[@]}" --json-keys text \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model "$model" \
  --append-eod --workers "$workers" --output-prefix "$prefix"
echo "prepare_corpus.sh: wrote ${prefix}_text_document.{bin,idx}"
