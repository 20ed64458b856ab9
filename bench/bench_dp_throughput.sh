#!/usr/bin/env bash
# Data parallelism on one CPU node: training throughput of dp=2 (two ranks, one thread each, as
# pretrain chooses by itself: threads per rank = cores / ranks on the node) against one process
# with two threads, same model and global batch, in one run. Default model: GPT-2 124M
# (recipes/gpt2_124m.yaml on the CPU in fp32, seq 256, global batch 8, mock data).
#   bench/bench_dp_throughput.sh [STEPS] [RECIPE] [extra --set overrides...]
#   bench/bench_dp_throughput.sh 12 recipes/gpt_tiny.yaml   (needs tools/prepare_corpus.sh done)
# Needs build/bin/pretrain. Neither run sets OMP_NUM_THREADS: the thread counts are pretrain's own.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8}
recipe=${2:-recipes/gpt2_124m.yaml}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
if [ "$recipe" = recipes/gpt2_124m.yaml ] && [ ${#extra[@]} -eq 0 ]; then
  extra=(--set training.device=cpu --set training.precision=fp32 --set data.mock=true
         --set model.vocab_size=50257 --set model.seq_length=256
         --set model.max_position_embeddings=256 --set training.micro_batch_size=4
         --set training.global_batch_size=8 --set parallel.data=auto)
fi
common=(--recipe "$recipe" --set "training.train_iters=$steps" --set training.eval_iters=0
        --set training.eval_interval=0 --set optimizer.schedule.warmup_iters=2
        --set logging.jsonl=null --set logging.interval=1 --set checkpoint.save=null --set checkpoint.save_interval=null
        --set checkpoint.load=null "${extra[@]}")
mean_tok_s() {  # mean tokens/s over the steps after the first two (warm-up)
  grep -o '[0-9]* tok/s' | awk 'NR > 2 { s += $1; n++ } END { if (n) printf "%.0f", s / n }'
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
one_log=$(mktemp) two_log=$(mktemp)
trap 'rm -f "$one_log" "$two_log"' EXIT
env -u OMP_NUM_THREADS build/bin/pretrain "${common[@]}" > "$one_log" 2>&1 || { cat "$one_log"; exit 1; }
env -u OMP_NUM_THREADS mpirun --allow-run-as-root -np 2 build/bin/pretrain "${common[@]}" \
  > "$two_log" 2>&1 || { cat "$two_log"; exit 1; }
one=$(mean_tok_s < "$one_log") two=$(mean_tok_s < "$two_log")
echo "1 process: $(grep -m1 -o '[0-9]* threads per rank' "$one_log"), ${one} tokens/s"
echo "dp=2:      $(grep -m1 -o '[0-9]* threads per rank' "$two_log"), ${two} tokens/s"
awk -v a="$one" -v b="$two" 'BEGIN { if (a > 0) printf "dp=2 / single: %.2fx\n", b / a }'
