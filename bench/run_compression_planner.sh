#!/usr/bin/env bash
# Where communication compression pays off: the planner's step-time model (megatron/planning)
# for one recipe on a cluster whose inter-node link gets slower, side by side: AdamW with the
# plain all-reduce (no_shard), the distributed optimizer (optim), ZeRO-3 and ZeRO++ (int8 unit
# gathers and gradient reduce-scatters), top-k compression at --ratio, and 1-bit Adam past its
# freeze. Printed per link speed: the estimated step time, the exposed
# data-parallel communication and the bytes each rank sends per step. A model, not a measurement
# (bench/run_compression_bench.sh measures bytes and loss on this CPU).
#
#   bench/run_compression_planner.sh [--recipe R.yaml] [--nodes N] [--gbps "400 100 25 10 3"]
#                                    [--ratio R] [--build-dir DIR]
# Defaults: recipes/gpt_1.3b.yaml on 4 nodes of the recipe's GPUs, ratio 0.01. Needs tools/build.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
recipe="$root/recipes/gpt_1.3b.yaml" nodes=4 gbps="400 100 25 10 3" ratio=0.01 build_dir="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --recipe) recipe="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --gbps) gbps="$2"; shift 2 ;;
    --ratio) ratio="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_compression_planner.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
plan="$build_dir/bin/plan"
[ -x "$plan" ] || { echo "run_compression_planner.sh: no $plan (run tools/build.sh)" >&2; exit 1; }

estimate() {  # gbps, --set flags...: step s, exposed dp s, dp GB per step (or "does not fit")
  local g="$1"; shift
  "$plan" --recipe "$recipe" --nodes "$nodes" --inter-node-gbps "$g" --json "$@" 2>/dev/null |
    python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j["time"]
if not j["fits"]:
    print("%10s %10s %10s" % ("no fit", "-", "-"))
else:
    print("%10.3f %10.3f %10.3f" % (t["step_s"], t["dp_comm_exposed_s"], t["dp_bytes_per_step"] / 1e9))
' || true
}

echo "# $(basename "$recipe") on $nodes nodes; the planner's model (step s | exposed dp s | dp GB sent per step per rank)"
printf '%-10s %-24s %10s %10s %10s\n' "Gb/s" method "step s" "dp s" "dp GB"
freeze="--set optimizer.freeze_step=1000000 --set training.train_iters=2000000"
for g in $gbps; do
  no_shard="--set optimizer.distributed=false --set parallel.data_parallel_sharding_strategy=no_shard"
  printf '%-10s %-24s %s\n' "$g" "adamw no_shard" "$(estimate "$g" $no_shard)"
  printf '%-10s %-24s %s\n' "$g" "adamw optim" \
    "$(estimate "$g" --set optimizer.distributed=false --set parallel.data_parallel_sharding_strategy=optim)"
  zero3="--set optimizer.distributed=false --set parallel.data_parallel_sharding_strategy=optim_grads_params"
  printf '%-10s %-24s %s\n' "$g" "adamw zero-3" "$(estimate "$g" $zero3)"
  printf '%-10s %-24s %s\n' "$g" "zero++ (int8 qwZ + qgZ)" "$(estimate "$g" $zero3 \
    --set parallel.zero_quantized_weights=true --set parallel.zero_quantized_gradients=true)"
  printf '%-10s %-24s %s\n' "$g" "topk $ratio" "$(estimate "$g" $no_shard \
    --set parallel.grad_compression=topk --set parallel.topk_ratio="$ratio")"
  printf '%-10s %-24s %s\n' "$g" "onebit_adam (frozen)" "$(estimate "$g" $no_shard \
    --set optimizer.type=onebit_adam $freeze)"
done
