#!/usr/bin/env bash
# Data-parallel gradient compression against the uncompressed run, side by side in one run on
# this CPU: each model of --models at each dp size of --dp trains --steps steps on the shipped
# corpus twice, plain (all-reduce) and with parallel.grad_compression topk at --ratio, from the
# same seed; printed per run: the payload bytes each rank hands to the data-parallel
# collectives per step (the trainer's dp_comm_bytes, median over the steps), the final
# validation loss, step time; then per pair the traffic reduction and the validation-loss
# difference.
#
#   bench/run_compression_bench.sh [--steps N] [--dp "2 4"] [--ratio R] [--warmup W]
#                                  [--models "gpt_tiny llama_tiny"] [--build-dir DIR] [--out DIR]
# --warmup: parallel.topk_warmup_iters (the share falls from 1 to R over W steps; default 0).
# Defaults: 300 steps, dp 2, ratio 0.01, gpt_tiny and llama_tiny (about 12 minutes on 2 cores).
# Needs the corpus (tools/prepare_corpus.sh), a build (tools/build.sh) and mpirun.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=300 dps="2" ratio=0.01 warmup=0 models="gpt_tiny llama_tiny" build_dir="$root/build" out_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --dp) dps="$2"; shift 2 ;;
    --ratio) ratio="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_compression_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/compression"
mkdir -p "$out_dir"
pretrain="$build_dir/bin/pretrain"
[ -x "$pretrain" ] || { echo "run_compression_bench.sh: no $pretrain (run tools/build.sh)" >&2; exit 1; }
cd "$root"
rm -f "$out_dir"/*.jsonl "$out_dir"/*.out
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
echo "# $steps steps, top-k ratio $ratio, warm-up $warmup steps"

run() {  # name, ranks, recipe, extra --set flags...
  local name="$1" ranks="$2" recipe="$3"; shift 3
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
    "$pretrain" --recipe "$recipe" --set training.train_iters="$steps" \
    --set training.eval_interval="$steps" --set training.eval_iters=4 \
    --set parallel.data="$ranks" --set training.threads=1 \
    --set logging.jsonl="$out_dir/$name.jsonl" --set logging.interval=1000 "$@" \
    > "$out_dir/$name.out" 2>&1 || { echo "run $name failed: $out_dir/$name.out" >&2; exit 1; }
}

summary() {  # jsonl: median dp bytes per step, last validation loss, median step seconds
  python3 - "$1" <<'PY'
import json, statistics, sys
steps, val = [], None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if "dp_comm_bytes" in e and "lm_loss" in e:
        steps.append(e)
    if "val_loss" in e:
        val = e["val_loss"]
print(statistics.median(s["dp_comm_bytes"] for s in steps), val,
      statistics.median(s["step_seconds"] for s in steps))
PY
}

printf '%-28s %14s %10s %9s\n' run "dp bytes/step" "val loss" "step ms"
for model in $models; do
  for dp in $dps; do
    run "${model}_dp${dp}" "$dp" "recipes/$model.yaml"
    run "${model}_dp${dp}_topk" "$dp" "recipes/$model.yaml" \
      --set parallel.grad_compression=topk --set parallel.topk_ratio="$ratio" \
      --set parallel.topk_warmup_iters="$warmup"
    read -r b0 v0 t0 <<< "$(summary "$out_dir/${model}_dp${dp}.jsonl")"
    read -r b1 v1 t1 <<< "$(summary "$out_dir/${model}_dp${dp}_topk.jsonl")"
    printf '%-28s %14.0f %10.4f %9.1f\n' "${model}_dp${dp}" "$b0" "$v0" "$(python3 -c "print($t0*1e3)")"
    printf '%-28s %14.0f %10.4f %9.1f\n' "${model}_dp${dp}_topk" "$b1" "$v1" "$(python3 -c "print($t1*1e3)")"
    python3 -c "print('  %s dp%s: traffic %.1fx less, validation loss %+.2f%%' % ('$model', '$dp', $b0 / $b1, 100 * ($v1 - $v0) / $v0))"
  done
done
