#!/usr/bin/env bash
# Importing gpt-oss-120b's released form: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised gpt-oss-120b-shaped Hugging Face directory at its real widths (hidden
# 2880, vocabulary 201088, one layer with 16 of its 128 experts; the experts' weights MXFP4
# `_blocks` / `_scales`, the rest bf16; ~2.7 GB, written by bench/gpt_oss_mxfp4_checkpoint.py
# with torch from bench/bench_venv.sh), imported into an ep 2 native checkpoint (fp32). Each
# expert's slab is read from the fused tensors and dequantized on its own, so the peak should
# stay near twice the largest tensor (the fp32 embedding or head, 2209 MiB), not the fused
# experts'.
#   bench/run_hf_mxfp4_import_bench.sh [--build-dir build] [--work DIR]
# Needs ~10 GB free under DIR (default /tmp/hf_mxfp4_bench); removes what it wrote.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" work=/tmp/hf_mxfp4_bench
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
source "$root/bench/bench_venv.sh"
bench_venv "$build" 2.9.1  # sets vpython
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
"$vpython" "$root/bench/gpt_oss_mxfp4_checkpoint.py" "$work/hf" "$root/tests/fixtures/hf_configs/gpt_oss_120b.json"
du -sh "$work/hf"
/usr/bin/time -v "$build/bin/convert_checkpoint" --from-hf "$work/hf" --to "$work/native" \
  --expert-parallel 2 > "$work/import.out" 2> "$work/import.time"
cat "$work/import.out"
rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$work/import.time")
secs=$(awk -F': ' '/Elapsed/ {print $2}' "$work/import.time")
printf 'import wall %s, peak RSS %.0f MiB (largest tensor, the fp32 embedding: 2209 MiB)\n' \
  "$secs" "$(echo "$rss / 1024" | bc -l)"
du -sh "$work/native"
