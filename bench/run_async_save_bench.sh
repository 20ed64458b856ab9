#!/usr/bin/env bash
# How long training waits for a checkpoint save, synchronous against checkpoint.async_save, on a
# model whose checkpoint takes seconds to write: llama_tiny widened to 12 layers, hidden 1024
# (about 170M parameters: weights and two Adam moments, about 2 GB per checkpoint), on the
# shipped corpus. Each mode trains STEPS steps saving every 4 (keep_last 1); the trainer logs
# each save's blocked time ("training blocked X s": the whole save when synchronous; the copy to
# host memory plus the commit when asynchronous; a wait at the end of the run is reported apart)
# and, for asynchronous saves, how long the background write took. Reports per mode: the mean
# blocked time per save, the mean step time, the whole run's wall time and its excess over a run
# without saves per save (on 2 cores the background write also slows the steps it overlaps),
# and the ratio async / sync of the blocked time (the goal of issue 38: <= 10%).
#
#   bench/run_async_save_bench.sh [--build DIR] [--steps N] [--out DIR]
# Needs the tokenized corpus (tools/prepare_corpus.sh). Default 12 steps (3 saves per mode),
# a few minutes on 2 cores; the checkpoints go to --out (default a temporary directory), which
# needs about 4 GB free.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build" steps=12 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run_async_save_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
pretrain="$build/bin/pretrain"
[ -x "$pretrain" ] || { echo "run_async_save_bench: build first ($pretrain)" >&2; exit 1; }
[ -n "$out" ] || { out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"
cd "$root"

model=(--recipe recipes/llama_tiny.yaml --set model.num_layers=12 --set model.hidden_size=1024
       --set model.num_attention_heads=16 --set model.num_query_groups=4
       --set model.ffn_hidden_size=2816 --set model.seq_length=128
       --set training.micro_batch_size=1 --set training.global_batch_size=2
       --set training.train_iters="$steps" --set training.eval_interval=0
       --set training.eval_iters=0 --set optimizer.schedule.warmup_iters=1
       --set logging.interval=1 --set logging.jsonl=null)

start=$(date +%s.%N)
"$pretrain" "${model[@]}" > "$out/none.log" 2>&1 || { echo "run without saves failed"; exit 1; }
python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$(date +%s.%N)" "$start" \
  > "$out/none.wall"
printf 'no saves: run %.1f s\n' "$(cat "$out/none.wall")"
for mode in sync async; do
  rm -rf "$out/ckpt_$mode"
  extra=()
  [ "$mode" = async ] && extra=(--set checkpoint.async_save=true)
  start=$(date +%s.%N)
  "$pretrain" "${model[@]}" --set checkpoint.save="$out/ckpt_$mode" \
    --set checkpoint.save_interval=4 --set checkpoint.keep_last=1 "${extra[@]}" \
    > "$out/$mode.log" 2>&1 || { echo "$mode run failed:"; tail -5 "$out/$mode.log"; exit 1; }
  end=$(date +%s.%N)
  python3 - "$mode" "$out/$mode.log" "$start" "$end" "$out/ckpt_$mode" << 'EOF'
import os, re, sys
mode, log, start, end, ckpt = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
text = open(log).read()
blocked = [float(x) for x in re.findall(r"training blocked ([0-9.]+) s", text)]
written = [float(x) for x in re.findall(r"written in the background in ([0-9.]+) s", text)]
steps = [float(x) for x in re.findall(r"\| ([0-9.]+) ms \|", text)]
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs)
exit_wait = [float(x) for x in re.findall(r"the end of the run waited ([0-9.]+) s", text)]
none = float(open(os.path.join(os.path.dirname(log), "none.wall")).read())
wall = float(end) - float(start)
print(f"{mode}: {len(blocked)} saves of {size / 1e9:.2f} GB; blocked {sum(blocked) / len(blocked):.2f} s"
      f" per save (each: {', '.join(f'{b:.2f}' for b in blocked)})"
      + (f"; background writes {sum(written) / len(written):.2f} s each" if written else "")
      + (f"; the run's end waited {exit_wait[0]:.2f} s for the last" if exit_wait else "")
      + f"; mean step {sum(steps) / len(steps) / 1000:.2f} s; run {wall:.1f} s"
      + f" ({(wall - none) / len(blocked):.2f} s per save over the run without saves)")
open(os.path.join(os.path.dirname(log), mode + ".blocked"), "w").write(str(sum(blocked) / len(blocked)))
EOF
done
python3 -c "
import sys
s, a = (float(open(sys.argv[1] + '/' + m + '.blocked').read()) for m in ('sync', 'async'))
print(f'async / sync blocked time per save: {a / s * 100:.1f}% (goal <= 10%)')" "$out"
