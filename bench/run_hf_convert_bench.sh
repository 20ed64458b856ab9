#!/usr/bin/env bash
# Converting a full-size checkpoint: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised LLaMA-2-7B-shaped Hugging Face directory (bf16, 13.5 GB, written by
# bench_hf_random_checkpoint), imported into a tp 2 x pp 2 native checkpoint (fp32, 27 GB) and
# exported back to bf16, whose files must be byte-identical to the source's.
#   bench/run_hf_convert_bench.sh [--build-dir build] [--work DIR] [--layers N]
# Needs ~45 GB free under DIR (default /tmp/hf_convert_bench); removes what it wrote.
set -euo pipefail
build=build work=/tmp/hf_convert_bench layers=32
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
[ -x "$build/bin/bench_hf_random_checkpoint" ] ||
  { echo "needs $build/bin/bench_hf_random_checkpoint (tools/build.sh --tests)" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
measure() {  # label, command...
  local label="$1"; shift
  /usr/bin/time -v "$@" > "$work/$label.out" 2> "$work/$label.time"
  local rss secs
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$work/$label.time")
  secs=$(awk -F': ' '/Elapsed/ {print $2}' "$work/$label.time")
  printf '%-8s wall %s, peak RSS %.0f MiB\n' "$label" "$secs" "$(echo "$rss / 1024" | bc -l)"
}
measure write "$build/bin/bench_hf_random_checkpoint" "$work/hf" --layers "$layers"
cat "$work/write.out"
(cd "$work/hf" && sha256sum ./*) > "$work/sha.src"
du -sh "$work/hf"
measure import "$build/bin/convert_checkpoint" --from-hf "$work/hf" --to "$work/native" \
  --tensor-parallel 2 --pipeline-parallel 2
rm -rf "$work/hf"
du -sh "$work/native"
measure export "$build/bin/convert_checkpoint" --from "$work/native" --to-hf "$work/hf2"
(cd "$work/hf2" && sha256sum ./*) > "$work/sha.out"
if diff -q "$work/sha.src" "$work/sha.out" >/dev/null; then
  echo "round trip: every file byte-identical"
else
  echo "round trip: FILES DIFFER" >&2; diff "$work/sha.src" "$work/sha.out" >&2; exit 1
fi
