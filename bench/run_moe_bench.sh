#!/usr/bin/env bash
# Mixture of experts against the dense model of the same active parameters, side by side in one
# run on this CPU: llama_tiny (SwiGLU 688) and mixtral_tiny (8 experts of 344, top-2: the same
# MLP FLOPs per token), both through `pretrain` on the shipped corpus, one process; then
# mixtral_tiny with expert parallelism 2 (mpirun -np 2, one thread each) beside llama_tiny on
# data parallelism 2. Prints per run the median of the timed steps: tokens/s, TFLOP/s (Megatron's
# formula; MoE counts active parameters), MFU against the hardware peak the trainer measures,
# and for MoE the share of the step spent in dispatch and combine (all-to-alls, permutations,
# gathers, gating) and the load imbalance.
#
#   bench/run_moe_bench.sh [--steps N] [--warmup W] [--build-dir DIR] [--out DIR] [--no-mpi]
# Defaults: 12 timed steps after 3 warm-up steps; about 3 minutes on 2 cores. Needs the corpus
# (tools/prepare_corpus.sh) and a build (tools/build.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=12 warmup=3 build_dir="$root/build" out_dir="" mpi=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_moe_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/moe"
mkdir -p "$out_dir"
pretrain="$build_dir/bin/pretrain"
[ -x "$pretrain" ] || { echo "run_moe_bench.sh: no $pretrain (run tools/build.sh)" >&2; exit 1; }
iters=$((steps + warmup))
cd "$root"

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
run() {  # name, ranks, recipe, extra --set flags...
  local name="$1" ranks="$2" recipe="$3"; shift 3
  local log="$out_dir/$name.jsonl"
  rm -f "$log"
  local cmd=("$pretrain" --recipe "$recipe" --set training.train_iters="$iters"
             --set training.eval_interval=0 --set training.eval_iters=0
             --set optimizer.schedule.warmup_iters=1
             --set logging.jsonl="$log" --set logging.interval=1000 "$@")
  echo "# load before $name: $(cut -d' ' -f1 /proc/loadavg)"
  if [ "$ranks" -gt 1 ]; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
      "${cmd[@]}" --set training.threads=1 > "$out_dir/$name.out" 2>&1
  else
    "${cmd[@]}" > "$out_dir/$name.out" 2>&1
  fi
}
run dense_llama_tiny 1 recipes/llama_tiny.yaml
run moe_mixtral_tiny 1 recipes/mixtral_tiny.yaml
if [ "$mpi" = 1 ]; then
  run dense_llama_tiny_dp2 2 recipes/llama_tiny.yaml --set parallel.data=2
  run moe_mixtral_tiny_ep2 2 recipes/mixtral_tiny.yaml --set parallel.data=2 \
    --set parallel.expert=2
fi

python3 - "$out_dir" "$warmup" <<'PY'
import json, statistics, sys, pathlib
out, warmup = pathlib.Path(sys.argv[1]), int(sys.argv[2])
print(f"{'run':24} {'tokens/s':>10} {'TFLOP/s':>9} {'MFU %':>7} {'dispatch %':>11} {'imbalance':>10}")
rows = {}
for name in ["dense_llama_tiny", "moe_mixtral_tiny", "dense_llama_tiny_dp2", "moe_mixtral_tiny_ep2"]:
    p = out / f"{name}.jsonl"
    if not p.exists():
        continue
    steps = [json.loads(l) for l in p.read_text().splitlines() if '"iteration"' in l and '"tokens_per_s"' in l]
    timed = steps[warmup:]
    if not timed:
        continue
    med = lambda k: statistics.median(s.get(k, 0.0) for s in timed)
    rows[name] = med("tokens_per_s")
    moe = "moe_dispatch_share" in timed[0]
    share = f"{100 * med('moe_dispatch_share'):11.1f}" if moe else f"{'-':>11}"
    imb = f"{med('moe_load_imbalance'):10.2f}" if moe else f"{'-':>10}"
    print(f"{name:24} {med('tokens_per_s'):10.0f} {med('tflops'):9.4f} {100 * med('mfu'):7.1f} {share} {imb}")
for dense, moe in [("dense_llama_tiny", "moe_mixtral_tiny"), ("dense_llama_tiny_dp2", "moe_mixtral_tiny_ep2")]:
    if dense in rows and moe in rows:
        print(f"{moe} / {dense}: {rows[moe] / rows[dense]:.2f}x tokens/s")
PY
