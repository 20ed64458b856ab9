#!/usr/bin/env bash
# Prints the 20-step training curves (loss and gradient norm of every step, at full double
# precision from the JSONL log) of gpt_tiny, llama_tiny and bert_tiny in three 2-rank layouts:
# tp2 + sequence parallelism, pp2 interleaved (2 virtual stages), dp2 with the distributed
# optimizer. A refactoring that claims "behaviour unchanged" shows it by an empty diff:
#   tools/loss_curves.sh build > /tmp/before.txt   # at the old commit
#   tools/loss_curves.sh build > /tmp/after.txt    # at the new one, same machine
#   diff /tmp/before.txt /tmp/after.txt
# (Curves are bit-identical only on one CPU: the GEMM library picks its kernels per ISA.)
# Needs the tokenized corpora (tools/prepare_corpus.sh) and mpirun.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
pretrain=$(cd "$build" && pwd)/bin/pretrain
[[ -x $pretrain ]] || { echo "loss_curves: no $pretrain (build first)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"

layouts=(
  "tp2_sp:--set parallel.tensor=2 --set parallel.sequence_parallel=true"
  "pp2_vpp2:--set parallel.pipeline=2 --set parallel.virtual_pipeline=2 --set training.global_batch_size=32"
  "dp2_distopt:--set parallel.data=2 --set optimizer.distributed=true"
)
for model in gpt_tiny llama_tiny bert_tiny; do
  for layout in "${layouts[@]}"; do
    name=${layout%%:*}
    log="$work/$model.$name.jsonl"
    # shellcheck disable=SC2086  # the layout's flags split on spaces
    if ! mpirun --allow-run-as-root --oversubscribe -n 2 "$pretrain" \
        --recipe "recipes/$model.yaml" --set training.train_iters=20 \
        --set optimizer.schedule.warmup_iters=5 --set logging.interval=1 \
        --set training.eval_interval=1000 --set training.threads=1 \
        --set "logging.jsonl=$log" ${layout#*:} >"$work/out.txt" 2>&1; then
      echo "loss_curves: $model $name failed:" >&2
      tail -20 "$work/out.txt" >&2
      exit 1
    fi
    # One line per step: model layout iteration loss grad_norm (as the JSONL wrote them).
    python3 - "$log" "$model" "$name" <<'EOF'
import json, sys
path, model, layout = sys.argv[1:]
for line in open(path):
    e = json.loads(line)
    if "iteration" in e and "loss" in e and "grad_norm" in e:
        print(model, layout, e["iteration"], repr(e["loss"]), repr(e["grad_norm"]))
EOF
  done
done
