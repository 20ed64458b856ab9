#!/usr/bin/env bash
# preprocess_data throughput on the shipped corpus (data/corpus/*.jsonl, 8.5 MB) with the shipped
# SentencePiece model (tokenizers/corpus_spm_8k.model) and --append-eod, for each worker count:
# wall time of each repetition, and input MB/s (10^6 bytes of JSONL per second) of the best and
# the median repetition. Also checks that every run wrote byte-identical outputs.
#
#   bench/bench_preprocess.sh [--workers "1 2"] [--reps 3] [--build-dir DIR] [--tokenizer-type T]
#
# Defaults: workers 1 and 2, 3 repetitions each (about 30 s in all on 2 idle cores). Other
# processes distort the numbers: the load average is printed before each run.
# --tokenizer-type ByteTokenizer measures the I/O + JSON path without SentencePiece.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
workers_list="1 2" reps=3 build_dir="$root/build" tok_type=SentencePieceTokenizer
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers_list="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --tokenizer-type) tok_type="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench_preprocess.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

bin="$build_dir/bin/preprocess_data"
if [ ! -x "$bin" ]; then
  echo "bench_preprocess.sh: $bin not found; build it: cmake --build $build_dir --target preprocess_data" >&2
  exit 1
fi
shopt -s nullglob
inputs=("$root"/data/corpus/*.jsonl)
shopt -u nullglob
[ ${#inputs[@]} -gt 0 ] || { echo "bench_preprocess.sh: no data/corpus/*.jsonl" >&2; exit 1; }
tok_args=(--tokenizer-type "$tok_type")
[ "$tok_type" = SentencePieceTokenizer ] && tok_args+=(--tokenizer-model "$root/tokenizers/corpus_spm_8k.model")

bytes=$(cat "${inputs[@]}" | wc -c)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "input: ${#inputs[@]} files, $bytes bytes; tokenizer $tok_type; $(nproc) cores"
printf '%-8s %-40s %12s %12s\n' workers "wall seconds per repetition" "best MB/s" "median MB/s"
ref_md5=""
for w in $workers_list; do
  times=()
  for ((r = 0; r < reps; r++)); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$bin" --input "${inputs[@]}" --output-prefix "$tmp/out" "${tok_args[@]}" --append-eod \
      --workers "$w" --log-interval 0 2> "$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc -l)")
    md5=$(cat "$tmp/out_text_document.bin" "$tmp/out_text_document.idx" | md5sum | cut -d' ' -f1)
    if [ -z "$ref_md5" ]; then ref_md5="$md5"; elif [ "$md5" != "$ref_md5" ]; then
      echo "bench_preprocess.sh: outputs differ between runs (workers $w)" >&2; exit 1
    fi
    echo "  (workers $w, repetition $((r + 1)): load average $load before, ${times[-1]} s)" >&2
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -g))
  best=${sorted[0]} median=${sorted[$((reps / 2))]}
  list=$(printf '%.2f ' "${times[@]}")
  printf '%-8s %-40s %12.2f %12.2f\n' "$w" "$list" "$(echo "$bytes / $best / 1000000" | bc -l)" \
    "$(echo "$bytes / $median / 1000000" | bc -l)"
done
echo "outputs identical across all runs (md5 $ref_md5)"
