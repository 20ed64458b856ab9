#!/usr/bin/env bash
# Importing DeepSeek-V3's released form: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised DeepSeek-V3-shaped Hugging Face directory at its real widths (hidden 7168,
# vocabulary 129280, MLA, one dense layer and one MoE layer with 16 of its 256 experts and the
# shared one; FP8 e4m3 weights in 128 x 128 blocks, bf16 embeddings; ~4.9 GB, written by
# bench/deepseek_fp8_checkpoint.py with torch from bench/bench_venv.sh), imported into an ep 2
# native checkpoint
# (fp32). The FP8 weights are dequantized tensor by tensor as they stream, so the peak should
# stay near twice the largest tensor (the fp32 embedding, 3.5 GiB).
#   bench/run_hf_fp8_import_bench.sh [--build-dir build] [--work DIR]
# Needs ~20 GB free under DIR (default /tmp/hf_fp8_bench); removes what it wrote.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" work=/tmp/hf_fp8_bench
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
"$vpython" "$root/bench/deepseek_fp8_checkpoint.py" "$work/hf" "$root/tests/fixtures/hf_configs/deepseek_v3.json"
du -sh "$work/hf"
/usr/bin/time -v "$build/bin/convert_checkpoint" --from-hf "$work/hf" --to "$work/native" \
  --expert-parallel 2 > "$work/import.out" 2> "$work/import.time"
cat "$work/import.out"
rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$work/import.time")
secs=$(awk -F': ' '/Elapsed/ {print $2}' "$work/import.time")
printf 'import wall %s, peak RSS %.0f MiB (largest tensor, the fp32 embedding: 3535 MiB)\n' \
  "$secs" "$(echo "$rss / 1024" | bc -l)"
du -sh "$work/native"
