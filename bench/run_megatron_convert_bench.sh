#!/usr/bin/env bash
# Megatron-LM checkpoints of a full-width model in and out: time and peak memory (RSS) of
# convert_checkpoint on a randomly initialised LLaMA-2-7B-shaped model (hidden 4096, ffn 11008,
# 32 heads, vocabulary 32000; --layers N of them, default 4: every tensor at full size, the
# largest being the 32000 x 4096 embedding and output layer, which set the peak):
#   export  native (tp 1) -> Megatron-LM torch_dist, bf16      (one data file)
#   import  torch_dist -> native tp 2 x pp 2
#   export  native -> Megatron-LM legacy torch, tp 2 x pp 2, bf16
#   import  legacy torch -> native tp 1
# and the last import exported to Hugging Face must equal the source directory byte for byte.
#   bench/run_megatron_convert_bench.sh [--build-dir build] [--work DIR] [--layers N]
# Needs ~6 GB per 4 layers free under DIR (default /tmp/mlm_convert_bench); removes what it wrote.
set -euo pipefail
build=build work=/tmp/mlm_convert_bench layers=4
label_width=16
source "$(dirname "$0")/convert_bench_common.sh"
cc="$build/bin/convert_checkpoint"
"$build/bin/bench_hf_random_checkpoint" "$work/hf" --layers "$layers" > /dev/null
(cd "$work/hf" && sha256sum ./*) > "$work/sha.src"
"$cc" --from-hf "$work/hf" --to "$work/native" > /dev/null
echo "largest tensor: 32000 x 4096 = $((32000 * 4096 * 4 / 1048576)) MiB in fp32"
measure export-dist "$cc" --from "$work/native" --to-megatron "$work/mlm_dist" --dtype bf16
du -sh "$work/mlm_dist"
measure import-dist "$cc" --from-megatron "$work/mlm_dist" --to "$work/native_tp2pp2" \
  --tensor-parallel 2 --pipeline-parallel 2
rm -rf "$work/mlm_dist"
measure export-legacy "$cc" --from "$work/native_tp2pp2" --to-megatron "$work/mlm_legacy" \
  --format torch --tensor-parallel 2 --pipeline-parallel 2 --dtype bf16
rm -rf "$work/native_tp2pp2" "$work/native"
du -sh "$work/mlm_legacy"
measure import-legacy "$cc" --from-megatron "$work/mlm_legacy" --to "$work/native2"
rm -rf "$work/mlm_legacy"
"$cc" --from "$work/native2" --to-hf "$work/hf2" --dtype bf16 > /dev/null
(cd "$work/hf2" && sha256sum ./*) > "$work/sha.out"
if diff -q "$work/sha.src" "$work/sha.out" >/dev/null; then
  echo "round trip HF -> native -> Megatron (both formats) -> native -> HF: every file byte-identical"
else
  echo "round trip: FILES DIFFER" >&2; diff "$work/sha.src" "$work/sha.out" >&2; exit 1
fi
