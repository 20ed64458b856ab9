#!/usr/bin/env bash
# Data-parallel sharding strategies side by side on one CPU node: peak memory per rank (tensor
# bytes the trainer allocated, and process RSS), the planner's prediction, the ZeRO paper's
# per-rank model-state formula, throughput relative to ZeRO-1, and the data-parallel payload bytes
# each rank hands to collectives per step. Default model: GPT, 12 layers, hidden 1024, ffn 4096, 16 heads,
# seq 128, vocabulary 32000 (mock data), bf16 mixed precision, dp 4, one micro-batch per rank.
#   bench/bench_zero_memory.sh [STEPS] [RANKS] [extra --set overrides...]
# Needs build/bin/pretrain, build/bin/plan and mpirun. Ranks are oversubscribed on small machines:
# throughput ratios are only meaningful within one run of this script.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3}
ranks=${2:-4}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
sets=(--set training.device=cpu --set training.precision=bf16 --set data.mock=true
      --set data.tokenizer.type=NullTokenizer --set data.tokenizer.vocab_size=32000
      --set model.vocab_size=32000 --set model.num_layers=12 --set model.hidden_size=1024
      --set model.num_attention_heads=16 --set model.ffn_hidden_size=4096 --set model.seq_length=128
      --set model.max_position_embeddings=128 --set training.micro_batch_size=1
      --set "training.global_batch_size=$ranks" --set "training.train_iters=$steps"
      --set training.eval_iters=0 --set training.eval_interval=0
      --set optimizer.schedule.warmup_iters=1 --set logging.interval=1
      --set checkpoint.save=null --set checkpoint.save_interval=null --set checkpoint.load=null
      "${extra[@]}")
recipe=recipes/gpt_tiny.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$(lscpu | grep -m1 'Model name' | sed 's/ \+/ /g'); $(nproc) cores; $ranks ranks; $steps steps"
declare -A toks rows dps
for strategy in no_shard optim optim_grads optim_grads_params; do
  log="$work/$strategy.log" jsonl="$work/$strategy.jsonl"
  env -u OMP_NUM_THREADS mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
    build/bin/pretrain --recipe "$recipe" "${sets[@]}" \
    --set "parallel.data_parallel_sharding_strategy=$strategy" --set "logging.jsonl=$jsonl" \
    > "$log" 2>&1 || { tail -30 "$log"; exit 1; }
  params=$(grep -m1 -o '[0-9]* parameters' "$log" | cut -d' ' -f1)
  mem_line=$(grep -m1 'peak memory per rank' "$log")
  tensors=$(echo "$mem_line" | grep -o '[0-9]* / [0-9]*' | awk '{ if ($1 > m) m = $1 } END { print m }')
  rss=$(echo "$mem_line" | grep -o '[0-9]* / [0-9]*' | awk '{ if ($3 > m) m = $3 } END { print m }')
  tok=$(grep -o '[0-9]* tok/s' "$log" | awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.0f", s / n; else print 0 }')
  toks[$strategy]=$tok
  dp_mib=$(python3 -c "import json,sys; r=[json.loads(l) for l in open('$jsonl')]; print('%.1f' % (r[-1]['dp_comm_bytes'] / 1048576))")
  planned=$(build/bin/plan --recipe "$recipe" "${sets[@]}" --set "parallel.data=$ranks" \
              --set "parallel.data_parallel_sharding_strategy=$strategy" --json 2>/dev/null |
            python3 -c "import json,sys; print('%.0f' % (json.load(sys.stdin)['memory']['total'] / 1048576))" || echo "?")
  # Model state per rank (bytes per parameter, N = ranks): the ZeRO paper counts fp16 gradients
  # (16, 4 + 12/N, 2 + 14/N, 16/N); this implementation keeps fp32 main gradients (18, 6 + 12/N
  # (+ 4/N reduce-scatter scratch), 2 + 16/N, 18/N).
  read -r paper mine < <(python3 - "$strategy" "$params" "$ranks" <<'PY'
import sys
s, p, n = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
paper = {"no_shard": 16, "optim": 4 + 12 / n, "optim_grads": 2 + 14 / n, "optim_grads_params": 16 / n}[s]
mine = {"no_shard": 18, "optim": 6 + 16 / n, "optim_grads": 2 + 16 / n, "optim_grads_params": 18 / n}[s]
print("%.0f %.0f" % (paper * p / 2**20, mine * p / 2**20))
PY
)
  rows[$strategy]="$params | $tensors | $rss | $planned | $paper | $mine | $tok"
  dps[$strategy]=$dp_mib
done
printf '| strategy | params | peak tensors/rank MiB (max) | peak RSS/rank MiB (max) | planner MiB | ZeRO paper MiB | this layout MiB | tok/s | vs optim | dp payload MiB/step |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for strategy in no_shard optim optim_grads optim_grads_params; do
  printf '| %s | %s | %s | %s |\n' "$strategy" "${rows[$strategy]}" \
    "$(awk -v a="${toks[$strategy]}" -v b="${toks[optim]}" 'BEGIN { if (b > 0) printf "%.2fx", a / b }')" \
    "${dps[$strategy]}"
done
echo "planner: build/bin/plan --recipe $recipe (the same --set overrides) --set parallel.data=$ranks; 'this layout' = the model state alone (weights, fp32 grads, masters, Adam) by the strategy's formula"
