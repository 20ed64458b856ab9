#!/usr/bin/env bash
# A run started in Megatron-LM continues here: each checkpoint Megatron-Core saved after 10
# training steps with its distributed optimizer (tests/fixtures/megatron_optim: dp_reshardable
# and fully_reshardable torch_dist, legacy distrib_optim.pt; dp 2 and tp 2 x dp 2; made by
# tools/gen_megatron_optimizer_fixtures.py on megatron-cpp's mock data) is imported with
# convert_checkpoint --from-megatron, and pretrain, with the recipe the import wrote, trains
# iterations 11..20. The logged losses must be the ones Megatron logged for the same iterations
# of its uninterrupted run (losses.json), within fp32 round-off; also under mpirun at dp 2 and
# at tp 2.
# usage: megatron_continue.sh CONVERT_BINARY PRETRAIN_BINARY MPIEXEC WORK_DIR
set -euo pipefail
convert=$1 pretrain=$2 mpiexec=$3 work=$4
src="$(cd "$(dirname "$0")/../.." && pwd)"
fixtures="$src/tests/fixtures/megatron_optim"
rm -rf "$work" && mkdir -p "$work"
mpi=("$mpiexec" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
status=0

check() {  # fixture, name, launcher... -- extra pretrain args
  local fixture=$1 name=$2; shift 2
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  local ck="$work/$name.ck"
  "$convert" --from-megatron "$fixtures/$fixture" --to "$ck" > "$work/$name.convert.log" 2>&1 ||
    { echo "FAIL: $name: import"; cat "$work/$name.convert.log"; exit 1; }
  grep -q "optimizer: Adam's moments and 10 steps" "$work/$name.convert.log" ||
    { echo "FAIL: $name: the optimizer state did not come along"; cat "$work/$name.convert.log"; exit 1; }
  if ! "${launcher[@]}" "$pretrain" --recipe "$ck/recipe.yaml" --set training.train_iters=20 \
      --set logging.interval=1 --set "logging.jsonl=$work/$name.jsonl" --set checkpoint.save= \
      --set training.eval_interval=0 "$@" > "$work/$name.log" 2>&1; then
    echo "FAIL: $name: pretrain exited non-zero"; tail -20 "$work/$name.log"; exit 1
  fi
  # Megatron's losses of iterations 11..20 (losses.json holds 1..20), then ours.
  local theirs ours
  theirs=$(tr -d ' \n' < "$fixtures/$fixture/losses.json" | sed 's/.*"losses":\[\([^]]*\)\].*/\1/' |
           tr ',' '\n' | tail -n 10)
  ours=$(grep -o '"loss":[-0-9.e+]*' "$work/$name.jsonl" | cut -d: -f2)
  if [ "$(echo "$ours" | wc -l)" -ne 10 ]; then
    echo "FAIL: $name: $(echo "$ours" | wc -l) logged steps, 10 expected (iterations 11..20)"
    status=1; return
  fi
  if paste <(echo "$theirs") <(echo "$ours") | awk -v n="$name" '
      { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r;
        if (NF != 2 || r > 2e-6) { bad = 1; printf "FAIL: %s iteration %d: %s vs Megatron %s\n", n, NR + 10, $2, $1 } }
      END { printf "%s: worst relative difference %.2g over iterations 11..20\n", n, worst; exit bad }'; then
    echo "ok: $name continues Megatron's loss curve"
  else
    status=1
  fi
}

check llama_dp2_torch_dist dist env OMP_NUM_THREADS=1 --
check llama_dp2_torch_dist_fully_reshardable fully_reshardable env OMP_NUM_THREADS=1 --
check llama_dp2_torch legacy env OMP_NUM_THREADS=1 --
check llama_tp2_dp2_torch_dist tp2_dist env OMP_NUM_THREADS=1 --
check llama_tp2_dp2_torch tp2_legacy env OMP_NUM_THREADS=1 --
check llama_dp2_torch_dist dist_dp2 "${mpi[@]}" -np 2 --
check llama_tp2_dp2_torch_dist tp2_dist_tp2 "${mpi[@]}" -np 2 -- --set parallel.tensor=2
exit $status
