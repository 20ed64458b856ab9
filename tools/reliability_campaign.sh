#!/usr/bin/env bash
# Reliability campaigns against a build, run by hand (results go in the notes):
#
#   kill   SIGKILL at random moments of runs that save a checkpoint every step (1 and 2 ranks;
#          the moment falls inside a save most of the time, saves being most of a step here).
#          After each kill: the newest complete checkpoint verifies (`checkpoint_info --verify`:
#          sizes, CRC-32C, tiling), nothing half-written is taken for complete, and resuming
#          from it continues the uninterrupted run's losses and gradient norms bit for bit.
#   signal SIGTERM to every rank as srun delivers it (and SIGUSR1, alternating): every rank
#          saves and exits 0, the checkpoint names the stop iteration, and resuming from it is
#          bit-exact.
#
#   tools/reliability_campaign.sh [--build DIR] [--trials N] [--signal-trials N] [--only kill|signal]
#                                 [--async] [--sharding STRATEGY]
# --async: the killed and signalled runs save with checkpoint.async_save (shards written in the
# background while training goes on); --sharding: every run uses
# parallel.data_parallel_sharding_strategy STRATEGY (e.g. optim_grads_params, ZeRO-3).
# Defaults: 20 kill trials per rank count, 10 signal trials; about 10 minutes on 2 cores. Needs
# the tokenized corpus (tools/prepare_corpus.sh) and mpirun. Exit status 0 when every trial
# passed; a summary line per campaign.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build" trials=20 signal_trials=10 only="" save_mode=() sharding=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --trials) trials="$2"; shift 2 ;;
    --signal-trials) signal_trials="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --async) save_mode=(--set checkpoint.async_save=true); shift ;;
    --sharding) sharding=(--set parallel.data_parallel_sharding_strategy="$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "reliability_campaign: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
pretrain="$build/bin/pretrain" info="$build/bin/checkpoint_info"
[ -x "$pretrain" ] && [ -x "$info" ] || { echo "reliability_campaign: build first" >&2; exit 1; }
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
cd "$root"

ITERS=300  # long enough that no run ends before its kill or signal
MORE=4      # steps a resumed run trains past its checkpoint (the schedule is fixed: decay_iters)
# A small GPT (saves of ~20 MB: most of each step) on the shipped corpus.
common=(--recipe recipes/gpt_tiny.yaml --set model.num_layers=2 --set model.hidden_size=128
        --set model.ffn_hidden_size=512 --set model.seq_length=64
        --set training.micro_batch_size=4 --set training.global_batch_size=8
        --set training.eval_interval=0 --set training.eval_iters=0
        --set optimizer.schedule.warmup_iters=2 --set optimizer.schedule.decay_iters=$ITERS
        --set logging.interval=1000
        --set training.threads=1 "${sharding[@]}")

launch() {  # ranks, log, extra args...: runs pretrain in the background, sets $pid
  local ranks=$1 log=$2; shift 2
  if [ "$ranks" -gt 1 ]; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -n "$ranks" "$pretrain" \
      "${common[@]}" --set parallel.data="$ranks" "$@" > "$log" 2>&1 &
  else
    "$pretrain" "${common[@]}" "$@" > "$log" 2>&1 &
  fi
  pid=$!
}

# "iteration loss grad_norm" per step of a JSONL log.
steps_of() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "iteration" in j and "loss" in j and "grad_norm" in j and j.get("event") is None:
        print(j["iteration"], repr(j["loss"]), repr(j["grad_norm"]))' "$1"
}

reference() {  # ranks -> $work/ref<ranks>.txt: the uninterrupted run
  local ranks=$1
  rm -f "$work/ref$ranks.jsonl"  # logging.jsonl appends
  launch "$ranks" "$work/ref$ranks.out" --set training.train_iters=$ITERS \
    --set logging.jsonl="$work/ref$ranks.jsonl"
  wait "$pid" || { echo "reference run ($ranks ranks) failed:"; tail -5 "$work/ref$ranks.out"; exit 1; }
  steps_of "$work/ref$ranks.jsonl" > "$work/ref$ranks.txt"
}

# Resumes from the newest checkpoint in $dir (auto-resume; none: from scratch) for MORE steps and
# compares them with the reference; prints why not.
resume_matches() {
  local ranks=$1 dir=$2 tag=$3 from=0
  [ -f "$dir/latest" ] && from=$((10#$(sed 's/iter_//' "$dir/latest")))
  launch "$ranks" "$work/$tag.resume.out" --set training.train_iters=$((from + MORE)) \
    --set checkpoint.save="$dir" --set logging.jsonl="$work/$tag.resume.jsonl"
  if ! wait "$pid"; then echo "resume failed: $(tail -2 "$work/$tag.resume.out")"; return 1; fi
  steps_of "$work/$tag.resume.jsonl" > "$work/$tag.resumed.txt"
  local first
  first=$(head -1 "$work/$tag.resumed.txt" | cut -d' ' -f1)
  [ "$first" = $((from + 1)) ] || { echo "resumed at '$first', expected $((from + 1))"; return 1; }
  if ! diff <(awk -v f="$first" -v l=$((from + MORE)) '$1 >= f && $1 <= l' "$work/ref$ranks.txt") \
            "$work/$tag.resumed.txt" > /dev/null; then
    echo "resumed steps differ from the uninterrupted run (from iteration $first)"; return 1
  fi
}

kill_campaign() {
  local ranks=$1 passed=0 during_save=0
  reference "$ranks"
  for t in $(seq 1 "$trials"); do
    local dir="$work/kill$ranks.$t" tag="kill$ranks.$t"
    launch "$ranks" "$work/$tag.out" --set training.train_iters=$ITERS \
      --set checkpoint.save="$dir" --set checkpoint.save_interval=1 --set checkpoint.keep_last=2 \
      "${save_mode[@]}"
    # A random moment of the run (start-up included: a kill before the first save is a case too).
    sleep "$(python3 -c "import random; print(round(random.uniform(0.3, 6.0), 2))")"
    ls -d "$dir"/*.tmp-* > /dev/null 2>&1 && during_save=$((during_save + 1))
    pkill -KILL -P "$pid" 2> /dev/null; kill -KILL "$pid" 2> /dev/null
    pkill -KILL -f "$dir" 2> /dev/null
    wait "$pid" 2> /dev/null
    local why=""
    if "$info" "$dir" > "$work/$tag.info" 2>&1; then
      resume_matches "$ranks" "$dir" "$tag" > "$work/$tag.why" || why=$(cat "$work/$tag.why")
    elif grep -qE "no complete checkpoint|does not exist" "$work/$tag.info"; then
      why=""  # killed before the first save completed: nothing to take, nothing taken
      resume_matches "$ranks" "$dir" "$tag" > "$work/$tag.why" || why=$(cat "$work/$tag.why")
    else
      why="newest checkpoint does not verify: $(tail -1 "$work/$tag.info")"
    fi
    if [ -z "$why" ]; then passed=$((passed + 1)); else echo "  kill trial $t ($ranks ranks): $why"; fi
  done
  echo "kill -9 campaign, $ranks rank(s)${save_mode:+, async saves}${sharding:+, ${sharding[1]}}:" \
    "$passed/$trials trials passed ($during_save killed while a save was in flight)"
  [ "$passed" = "$trials" ]
}

signal_campaign() {
  local ranks=2 passed=0
  reference "$ranks"
  for t in $(seq 1 "$signal_trials"); do
    local dir="$work/sig.$t" tag="sig.$t" sig=TERM
    [ $((t % 2)) = 0 ] && sig=USR1
    launch "$ranks" "$work/$tag.out" --set training.train_iters=$ITERS --set checkpoint.save="$dir" \
      "${save_mode[@]}"
    sleep "$(python3 -c "import random; print(round(random.uniform(1.0, 4.0), 2))")"
    pkill "-$sig" -P "$pid" 2> /dev/null  # the ranks, as srun signals them
    local rc=0 why=""
    wait "$pid" || rc=$?
    if [ "$rc" != 0 ]; then
      why="exit status $rc: $(tail -2 "$work/$tag.out")"
    elif ! grep -q "stopping at iteration" "$work/$tag.out" && ! grep -q "saved checkpoint" "$work/$tag.out"; then
      why="no stop or save reported"
    else
      resume_matches "$ranks" "$dir" "$tag" > "$work/$tag.why" || why=$(cat "$work/$tag.why")
    fi
    if [ -z "$why" ]; then passed=$((passed + 1)); else echo "  signal trial $t (SIG$sig): $why"; fi
  done
  echo "signal campaign (SIGTERM/SIGUSR1 to both ranks): $passed/$signal_trials trials passed"
  [ "$passed" = "$signal_trials" ]
}

status=0
if [ -z "$only" ] || [ "$only" = kill ]; then
  kill_campaign 1 || status=1
  kill_campaign 2 || status=1
fi
if [ -z "$only" ] || [ "$only" = signal ]; then
  signal_campaign || status=1
fi
exit $status
