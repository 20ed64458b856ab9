#!/usr/bin/env bash
# A shipped tiny recipe trains on the real corpus (data/cache, from the data.prepare_corpus
# fixture) with falling loss: a short run of the real pretrain binary, single process, whose
# JSONL log must hold every step and whose last validation loss (BERT: the masked-LM loss; the
# sentence-pair loss is logged too and stays near chance) must be clearly below the one at
# step 0.
# usage: recipe_learns.sh PRETRAIN_BINARY RECIPE_NAME WORK_DIR
set -euo pipefail
pretrain=$1 recipe=$2 work=$3/$recipe
src="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
cd "$src"
iters=30
args=(--recipe "recipes/$recipe.yaml" --set training.train_iters=$iters
      --set training.eval_interval=15 --set training.eval_iters=2
      --set optimizer.schedule.warmup_iters=3 --set training.peak_tflops=0.1
      --set "logging.jsonl=$work/log.jsonl")
ratio=0.8  # last validation loss < ratio * first
case "$recipe" in
  llama_tiny|mixtral_tiny|qwen3_moe_tiny|deepseek_tiny|gpt_oss_tiny)
    args+=(--set training.micro_batch_size=4 --set training.global_batch_size=4) ;;
  # The 30k WordPiece vocabulary makes the masked-LM head the bulk of the work: shorter
  # sequences and smaller batches keep the run short.
  bert_tiny) args+=(--set model.seq_length=64 --set model.max_position_embeddings=64
                    --set training.micro_batch_size=4 --set training.global_batch_size=4
                    --set optimizer.lr=2.0e-3) ;;
  *) ;;
esac
if ! env OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" "$pretrain" "${args[@]}" > "$work/out.log" 2>&1
then
  echo "FAIL: pretrain exited non-zero"; tail -20 "$work/out.log"; exit 1
fi
grep -E "^(model:|validation|iter)" "$work/out.log" || true
log="$work/log.jsonl"
field() { grep -o "\"$1\":[-0-9.e+]*" "$log" | cut -d: -f2; }
steps=$(field loss | wc -l)
[ "$steps" -eq "$iters" ] || { echo "FAIL: $steps steps logged in $log, expected $iters"; exit 1; }
val=$(field val_loss)
[ "$(echo "$val" | wc -l)" -eq 3 ] || { echo "FAIL: expected 3 evaluations (0, 15, 30)"; exit 1; }
first=$(echo "$val" | head -1) last=$(echo "$val" | tail -1)
status=0
if awk -v f="$first" -v l="$last" -v r="$ratio" 'BEGIN { exit !(l < r * f) }'; then
  echo "ok: $recipe validation loss $first -> $last (< $ratio x)"
else
  echo "FAIL: $recipe validation loss $first -> $last, not below $ratio x the first"; status=1
fi
if [ "$recipe" = bert_tiny ]; then
  nsp=$(field val_nsp_loss)
  [ "$(echo "$nsp" | wc -l)" -eq 3 ] || { echo "FAIL: expected 3 val_nsp_loss values"; exit 1; }
  [ "$(field nsp_loss | wc -l)" -eq "$iters" ] || { echo "FAIL: nsp_loss missing in steps"; exit 1; }
  # 30 steps are too few for the sentence-pair head to learn; it must stay near chance (ln 2).
  if echo "$nsp" | awk '{ if (!($1 > 0.2 && $1 < 1.6)) bad = 1 } END { exit bad }'; then
    echo "ok: bert_tiny sentence-pair validation losses near chance: $(echo $nsp | tr '\n' ' ')"
  else
    echo "FAIL: bert_tiny sentence-pair validation losses off: $(echo $nsp | tr '\n' ' ')"; status=1
  fi
fi
if [[ $recipe == mixtral_tiny || $recipe == qwen3_moe_tiny || $recipe == deepseek_tiny ||
      $recipe == gpt_oss_tiny ]]; then
  # The router's losses and the routing statistics are logged every step.
  for key in moe_aux_loss moe_z_loss moe_load_imbalance moe_dropped_fraction; do
    [ "$(field $key | wc -l)" -eq "$iters" ] || { echo "FAIL: $key missing in steps"; status=1; }
  done
  grep -q "mlp.experts" "$work/out.log" || grep -q "num_experts: 8" "$work/out.log" ||
    { echo "FAIL: the resolved recipe has no experts"; status=1; }
fi
exit $status
