#!/usr/bin/env bash
# The real pretrain binary on the shipped corpus: alone, and under mpirun with dp=2, tp=2,
# tp=2 + sequence parallel, the distributed optimizer, pp=2 (with a recorded timeline),
# context parallelism 2 (ring attention, with a recorded timeline that must show its exchanges)
# and tp=2 x pp=2 x dp=2 on 8 ranks, and mixtral_tiny at cp=2 x ep=2; every layout must log the single-process losses (per-step
# JSONL) within fp32 round-off.
# usage: pretrain_layouts.sh PRETRAIN_BINARY MPIEXEC WORK_DIR
set -euo pipefail
pretrain=$1 mpiexec=$2 work=$3
src="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
cd "$src"
common=(--recipe recipes/gpt_tiny.yaml --set training.train_iters=6 --set training.eval_iters=0
        --set training.eval_interval=0 --set optimizer.schedule.warmup_iters=2
        --set training.micro_batch_size=4 --set training.global_batch_size=8
        --set model.num_layers=2 --set model.seq_length=64 --set training.peak_tflops=0.1)
mpi=("$mpiexec" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)

run() {  # name, launcher..., -- extra args
  local name=$1; shift
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  if ! "${launcher[@]}" "$pretrain" "${common[@]}" --set "logging.jsonl=$work/$name.jsonl" "$@" \
      > "$work/$name.log" 2>&1; then
    echo "FAIL: $name exited non-zero"; tail -20 "$work/$name.log"; exit 1
  fi
}
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | cut -d: -f2; }

run single env OMP_NUM_THREADS=1 --
run dp2 "${mpi[@]}" -np 2 --
run tp2 "${mpi[@]}" -np 2 -- --set parallel.tensor=2
run tp2_sp "${mpi[@]}" -np 2 -- --set parallel.tensor=2 --set parallel.sequence_parallel=true
run dp2_distopt "${mpi[@]}" -np 2 -- --set optimizer.distributed=true
run pp2 "${mpi[@]}" -np 2 -- --set parallel.pipeline=2 --set "logging.timeline=$work/timeline"
run cp2 "${mpi[@]}" -np 2 -- --set parallel.context=2 --set "logging.timeline=$work/cp_timeline"
run tp2_pp2_dp2 "${mpi[@]}" -np 8 -- --set parallel.tensor=2 --set parallel.pipeline=2 \
    --set parallel.sequence_parallel=true --set training.micro_batch_size=2

# mixtral_tiny (2 layers) at cp 2 with ep 2: the two cp ranks of a sequence hold different
# experts (ep is carved out of cp x dp).
common[1]=recipes/mixtral_tiny.yaml
run moe_single env OMP_NUM_THREADS=1 --
run moe_cp2_ep2 "${mpi[@]}" -np 2 -- --set parallel.context=2 --set parallel.expert=2

status=0
compare() {  # reference, layouts...
  local ref name got
  ref=$(losses "$work/$1.jsonl"); shift
  [ "$(echo "$ref" | wc -l)" -eq 6 ] || { echo "FAIL: expected 6 steps in its jsonl"; exit 1; }
  for name in "$@"; do
    got=$(losses "$work/$name.jsonl")
    if ! paste <(echo "$ref") <(echo "$got") | awk -v n="$name" '
        { d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 2e-5 * $1) { bad = 1;
          printf "FAIL: %s step %d: %s vs single %s\n", n, NR, $2, $1 } }
        END { exit bad }'; then
      status=1
    else
      echo "ok: $name matches the single-process losses: $(echo $got | tr '\n' ' ')"
    fi
  done
}
compare single dp2 tp2 tp2_sp dp2_distopt pp2 cp2 tp2_pp2_dp2
compare moe_single moe_cp2_ep2
grep -q "cp 2 (p2p)" "$work/moe_cp2_ep2.log" || { echo "FAIL: moe_cp2_ep2 not at cp 2"; status=1; }
grep -q "launch: mpirun, 2 ranks" "$work/dp2.log" || { echo "FAIL: no launch report"; status=1; }
grep -q "cp 2 (p2p)" "$work/cp2.log" || { echo "FAIL: the cp2 run does not report cp 2"; status=1; }
for r in 0 1; do
  grep -q '"kind":"cp_exchange"' "$work/cp_timeline.rank$r.jsonl" ||
    { echo "FAIL: no cp_exchange in cp_timeline.rank$r.jsonl"; status=1; }
done
# The recorded pipeline timeline renders as an SVG.
if [ -n "${TIMELINE_TOOL:-}" ]; then
  "$TIMELINE_TOOL" --events "$work"/timeline.rank*.jsonl --output "$work/timeline.svg" \
    > "$work/timeline_tool.log" 2>&1 && grep -q "<svg" "$work/timeline.svg" \
    || { echo "FAIL: pipeline_timeline"; cat "$work/timeline_tool.log"; status=1; }
fi
exit $status
