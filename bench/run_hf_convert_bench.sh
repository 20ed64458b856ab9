#!/usr/bin/env bash
# Converting a full-size checkpoint: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised LLaMA-2-7B-shaped Hugging Face directory (bf16, 13.5 GB, written by
# bench_hf_random_checkpoint), imported into a tp 2 x pp 2 native checkpoint (fp32, 27 GB) and
# exported back to bf16, whose files must be byte-identical to the source's.
#   bench/run_hf_convert_bench.sh [--build-dir build] [--work DIR] [--layers N]
# Needs ~45 GB free under DIR (default /tmp/hf_convert_bench); removes what it wrote.
set -euo pipefail
build=build work=/tmp/hf_convert_bench layers=32
source "$(dirname "$0")/convert_bench_common.sh"
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
