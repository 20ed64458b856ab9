#!/usr/bin/env bash
# Data parallelism on one CPU node: training throughput of dp=2 (two ranks, one thread each)
# against one process with two threads, same model and global batch, in one run.
#   bench/bench_dp_throughput.sh [STEPS]     (needs build/ and tools/prepare_corpus.sh done)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
common=(--recipe recipes/gpt_tiny.yaml --set "training.train_iters=$steps" --set training.eval_iters=0
        --set training.eval_interval=0 --set optimizer.schedule.warmup_iters=2
        --set logging.jsonl=null --set logging.interval=1 --set training.peak_tflops=0.1)
mean_tok_s() {  # mean tokens/s over the steps after the first two (warm-up)
  grep -o '[0-9]* tok/s' | awk 'NR > 2 { s += $1; n++ } END { if (n) printf "%.0f", s / n }'
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
one=$(OMP_NUM_THREADS=2 build/bin/pretrain "${common[@]}" 2>&1 | mean_tok_s)
two=$(mpirun --allow-run-as-root -np 2 -x OMP_NUM_THREADS=1 build/bin/pretrain "${common[@]}" 2>&1 | mean_tok_s)
echo "1 process x 2 threads: ${one} tokens/s"
echo "dp=2 x 1 thread:       ${two} tokens/s"
awk -v a="$one" -v b="$two" 'BEGIN { if (a > 0) printf "dp=2 / single: %.2fx\n", b / a }'
