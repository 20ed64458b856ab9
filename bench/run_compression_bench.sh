#!/usr/bin/env bash
# Data-parallel communication compression against the uncompressed run, side by side in one run
# on this CPU: each model of --models at each dp size of --dp trains --steps steps on the shipped
# corpus plain (AdamW, all-reduce) and with each method of --methods, from the same seed:
#   topk    parallel.grad_compression topk at --ratio (warm-up --warmup)
#   onebit  optimizer.type onebit_adam, optimizer.freeze_step --freeze (AdamW until then)
#   zeropp  ZeRO++: int8 unit weight gathers and gradient reduce-scatters under
#           optim_grads_params, against a ZeRO-3 (optim_grads_params) run instead of the plain one
# Printed per run: the payload bytes each rank hands to the data-parallel collectives per step
# (the trainer's dp_comm_bytes, median over the steps; for onebit over the steps after the
# freeze), the final validation loss, step time; then per method the traffic reduction and the
# validation-loss difference against the plain run (zeropp: against ZeRO-3).
#
#   bench/run_compression_bench.sh [--steps N] [--dp "2 4"] [--methods "topk onebit zeropp"]
#                                  [--micro M]
#                                  [--ratio R] [--warmup W] [--freeze F]
#                                  [--models "gpt_tiny llama_tiny"] [--build-dir DIR] [--out DIR]
# --warmup: parallel.topk_warmup_iters (the share falls from 1 to R over W steps; default 0).
# --micro: training.micro_batch_size (gpt_tiny's 8 x dp 4 exceeds its global batch 16: --micro 4).
# --freeze: default a fifth of --steps (DeepSpeed suggests 15-25%; after the LR warm-up).
# Defaults: 300 steps, dp 2, every method, ratio 0.01, gpt_tiny and llama_tiny (about 25
# minutes on 2 cores).
# Needs the corpus (tools/prepare_corpus.sh), a build (tools/build.sh) and mpirun.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=300 dps="2" ratio=0.01 warmup=0 freeze="" methods="topk onebit zeropp"
models="gpt_tiny llama_tiny"
build_dir="$root/build" out_dir="" micro=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --dp) dps="$2"; shift 2 ;;
    --ratio) ratio="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --freeze) freeze="$2"; shift 2 ;;
    --micro) micro="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_compression_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/compression"
[ -n "$freeze" ] || freeze=$((steps / 5))
mkdir -p "$out_dir"
pretrain="$build_dir/bin/pretrain"
[ -x "$pretrain" ] || { echo "run_compression_bench.sh: no $pretrain (run tools/build.sh)" >&2; exit 1; }
cd "$root"
rm -f "$out_dir"/*.jsonl "$out_dir"/*.out
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
echo "# $steps steps, methods: $methods; top-k ratio $ratio, warm-up $warmup steps; 1-bit Adam freeze at step $freeze"

run() {  # name, ranks, recipe, extra --set flags...
  local name="$1" ranks="$2" recipe="$3"; shift 3
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
    "$pretrain" --recipe "$recipe" --set training.train_iters="$steps" \
    --set training.eval_interval="$steps" --set training.eval_iters=4 \
    --set parallel.data="$ranks" --set training.threads=1 \
    --set logging.jsonl="$out_dir/$name.jsonl" --set logging.interval=1000 \
    ${micro:+--set training.micro_batch_size="$micro"} "$@" \
    > "$out_dir/$name.out" 2>&1 || { echo "run $name failed: $out_dir/$name.out" >&2; exit 1; }
}

summary() {  # jsonl [after]: median dp bytes per step (iterations > after), last validation loss,
             # median step seconds (the same iterations)
  python3 - "$1" "${2:-0}" <<'PY'
import json, statistics, sys
steps, val = [], None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if "dp_comm_bytes" in e and "lm_loss" in e and e.get("iteration", 0) > int(sys.argv[2]):
        steps.append(e)
    if "val_loss" in e:
        val = e["val_loss"]
print(statistics.median(s["dp_comm_bytes"] for s in steps), val,
      statistics.median(s["step_seconds"] for s in steps))
PY
}

printf '%-28s %14s %10s %9s\n' run "dp bytes/step" "val loss" "step ms"
row() {  # name, bytes, val, seconds
  printf '%-28s %14.0f %10.4f %9.1f\n' "$1" "$2" "$3" "$(python3 -c "print($4*1e3)")"
}
for model in $models; do
  for dp in $dps; do
    if [ "$methods" != zeropp ]; then  # the plain run (zeropp compares with ZeRO-3)
      run "${model}_dp${dp}" "$dp" "recipes/$model.yaml"
      read -r b0 v0 t0 <<< "$(summary "$out_dir/${model}_dp${dp}.jsonl")"
      row "${model}_dp${dp}" "$b0" "$v0" "$t0"
    fi
    for method in $methods; do
      name="${model}_dp${dp}_$method" after=0 base="${model}_dp${dp}"
      case "$method" in
        topk) run "$name" "$dp" "recipes/$model.yaml" \
                --set parallel.grad_compression=topk --set parallel.topk_ratio="$ratio" \
                --set parallel.topk_warmup_iters="$warmup" ;;
        onebit) run "$name" "$dp" "recipes/$model.yaml" \
                  --set optimizer.type=onebit_adam --set optimizer.freeze_step="$freeze"
                after="$freeze" ;;
        zeropp) base="${model}_dp${dp}_zero3"
                zero3="--set parallel.data_parallel_sharding_strategy=optim_grads_params"
                run "$base" "$dp" "recipes/$model.yaml" $zero3
                read -r bz vz tz <<< "$(summary "$out_dir/$base.jsonl")"
                row "$base" "$bz" "$vz" "$tz"
                run "$name" "$dp" "recipes/$model.yaml" $zero3 \
                  --set parallel.zero_quantized_weights=true \
                  --set parallel.zero_quantized_gradients=true ;;
        *) echo "run_compression_bench.sh: unknown method '$method' (topk, onebit, zeropp)" >&2
           exit 2 ;;
      esac
      read -r b1 v1 t1 <<< "$(summary "$out_dir/$name.jsonl" "$after")"
      read -r b0a v0a _ <<< "$(summary "$out_dir/$base.jsonl" "$after")"
      row "$name" "$b1" "$v1" "$t1"
      python3 -c "print('  %s dp%s %s: traffic %.1fx less, validation loss %+.2f%% (vs %s)' % ('$model', '$dp', '$method', $b0a / $b1, 100 * ($v1 - $v0a) / $v0a, '$base'))"
    done
  done
done
