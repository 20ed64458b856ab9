#!/usr/bin/env bash
# Real Slurm launches on a local cluster (tools/slurm/local_cluster.sh), checked with the MPI
# probe (tests/slurm/mpi_probe.cpp). ctest runs one phase per test (label `slurm`):
#
#   run_slurm_tests.sh [PHASE ...]     # no phase: srun sbatch two_nodes (+ pretrain when set)
#
#   srun       one node: `srun -n 2 --mpi=pmix probe` (ranks talk, SLURM_PROCID = MPI rank);
#              a failing rank fails the step
#   sbatch     one node: `sbatch --wait` of a wrapped srun, of tools/slurm/pretrain_cpu.sbatch
#              and of tools/slurm/pretrain.sbatch with --gpus-per-node=0 (the probe as
#              PRETRAIN: checks the flags and threads the templates pass), output files, and
#              that the job's exit code comes back
#   two_nodes  nodes n1, n2: `srun -N 2 --ntasks-per-node=2` gives SLURM_NODEID 0,0,1,1 and
#              node names n1,n1,n2,n2, with distinct host names (unshare) and with one shared
#              host name; the CPU template across both nodes
#   pretrain   one node: `srun -n 2 $SLURM_TEST_PRETRAIN_CMD` and the CPU template running the
#              same command; both must exit 0 and print "validation"
#   elastic    nodes n1, n2: tools/slurm/pretrain_elastic.sbatch loses n2 mid-run (kill-node),
#              goes on on n1, grows back when n2 returns; the loss curve is the uninterrupted
#              single-process run's (the first word of $SLURM_TEST_PRETRAIN_CMD is the binary)
#   local_checkpoint  nodes n1, n2: a run with checkpoint.local_interval loses n2 and its local
#              copies; the rerun rebuilds n2's ranks from replicas on n1, losses bit for bit
#
# Environment:
#   MPI_PROBE               the mpi_probe binary (default: <repo>/build/bin/mpi_probe)
#   SLURM_LOCAL_DIR         the cluster's work dir (see local_cluster.sh)
#   SLURM_TEST_WORK_DIR     job outputs (default: $SLURM_LOCAL_DIR/test)
#   SLURM_TEST_PRETRAIN_CMD the pretrain command for the pretrain phase: the binary, then
#                           --recipe R, --set K=V (repeatable) and other flags, split on spaces
#                           (no quoting). Relative paths are relative to the repository root.
#   SLURM_TEST_TIME_LIMIT   seconds for the whole script (default 240; keep it under ctest's
#                           TIMEOUT): each launch's `timeout` is cut to what is left
#
# Needs root and the Slurm packages (tools/setup.sh): without them every phase FAILS. The
# daemons are always stopped on exit (trap, also on SIGINT/SIGTERM); every launch runs under
# `timeout` within SLURM_TEST_TIME_LIMIT, so a hung job fails the test before ctest's TIMEOUT
# would SIGKILL this script (that would leave the daemons running until the next start).
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cluster="$src/tools/slurm/local_cluster.sh"
export SLURM_LOCAL_DIR="${SLURM_LOCAL_DIR:-$src/build/slurm-local}"
PROBE="${MPI_PROBE:-$src/build/bin/mpi_probe}"
WORK_ROOT="${SLURM_TEST_WORK_DIR:-$SLURM_LOCAL_DIR/test}"
export PATH="$PATH:/usr/sbin:/sbin"

# A launcher environment we may have been started from (a CI job inside Slurm, mpirun) must not
# leak into the local cluster's jobs: srun would join the outer job's allocation. (Our own
# SLURM_LOCAL_* and SLURM_TEST_* settings stay.)
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|PMIX_)' |
                                         grep -vE '^SLURM_(LOCAL|TEST)_' || true)

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "== $*"; }

# The whole script ends within this many seconds (under ctest's TIMEOUT of 300, which would
# SIGKILL us and leave the daemons running until the next start).
TIME_LIMIT="${SLURM_TEST_TIME_LIMIT:-240}"
deadline=$((SECONDS + TIME_LIMIT))

phase_pid=""
kill_tree() {  # kill_tree PID: PID and all its descendants (children first)
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
  kill -TERM "$1" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  if [ -n "$phase_pid" ] && kill -0 "$phase_pid" 2>/dev/null; then kill_tree "$phase_pid"; fi
  "$cluster" stop || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

preflight() {
  local missing=()
  for b in slurmctld slurmd srun sbatch sinfo squeue scancel; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  [ ${#missing[@]} -eq 0 ] ||
    fail "Slurm is not installed (missing: ${missing[*]}): run tools/setup.sh first (packages slurmctld slurmd slurm-client)"
  [ "$(id -u)" -eq 0 ] || fail "the local Slurm cluster needs root"
  local ph needs_probe=0
  for ph in "${phases[@]}"; do case "$ph" in srun|sbatch|two_nodes) needs_probe=1 ;; esac; done
  if [ $needs_probe -eq 1 ]; then
    [ -x "$PROBE" ] || fail "MPI probe not found at '$PROBE': build the target mpi_probe (or set MPI_PROBE)"
  fi
}

start_cluster() {  # start_cluster NODES  (extra environment passes through, e.g. SLURM_LOCAL_UNSHARE)
  local out
  out="$("$cluster" start --nodes "$1")" || fail "local cluster did not start (see the log tail above)"
  eval "$out"   # export SLURM_CONF=...
  [ -n "${SLURM_CONF:-}" ] || fail "local_cluster.sh start printed no SLURM_CONF"
}

# run_to FILE TIMEOUT CMD...: runs CMD with stdout+stderr to FILE; prints FILE on failure.
# Returns CMD's exit status.
run_to() {
  local file="$1" secs="$2" rc=0 left; shift 2
  left=$((deadline - SECONDS))
  [ $left -gt 5 ] || fail "the slurm tests ran out of time (SLURM_TEST_TIME_LIMIT=${TIME_LIMIT}s) before: $*"
  [ "$secs" -le $left ] || secs=$left
  echo "\$ $*" >"$file.cmd"
  timeout --kill-after=5 "$secs" "$@" >"$file" 2>&1 || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    cat "$file" >&2
    fail "timed out after ${secs}s: $*"
  fi
  return $rc
}

must_run() {  # must_run FILE TIMEOUT CMD...: like run_to, and exit status 0 is required
  local file="$1" rc=0
  run_to "$@" || rc=$?
  if [ $rc -ne 0 ]; then
    cat "$file" >&2
    shift 2
    fail "exit status $rc: $*"
  fi
}

field() {  # field FILE NAME: the values of NAME=... on the probe's rank lines, in rank order
  sed -n "s/^probe rank=.* $2=\([^ ]*\).*/\1/p" "$1" | tr '\n' ' ' | sed 's/ $//'
}

# check_probe FILE N NODEIDS NODENAMES [HOSTS]: N rank lines, each with size=N and
# slurm_procid = rank, the allreduce ok, and the given per-rank values (space-separated).
check_probe() {
  local file="$1" n="$2" nodeids="$3" names="$4" hosts="${5:-}" r
  local lines
  lines="$(grep -c '^probe rank=' "$file" || true)"
  [ "$lines" -eq "$n" ] || { cat "$file" >&2; fail "$file: expected $n probe rank lines, got $lines"; }
  for ((r = 0; r < n; r++)); do
    grep -q "^probe rank=$r size=$n slurm_procid=$r " "$file" ||
      { cat "$file" >&2; fail "$file: rank $r: size is not $n or SLURM_PROCID differs from the MPI rank"; }
  done
  grep -q "^probe allreduce sum=$((n * (n + 1) / 2)) expected=$((n * (n + 1) / 2)) ok$" "$file" ||
    { cat "$file" >&2; fail "$file: allreduce across the ranks did not give the expected sum"; }
  [ "$(field "$file" slurm_nodeid)" = "$nodeids" ] ||
    { cat "$file" >&2; fail "$file: SLURM_NODEID per rank '$(field "$file" slurm_nodeid)', expected '$nodeids'"; }
  [ "$(field "$file" slurmd_nodename)" = "$names" ] ||
    { cat "$file" >&2; fail "$file: SLURMD_NODENAME per rank '$(field "$file" slurmd_nodename)', expected '$names'"; }
  if [ -n "$hosts" ]; then
    [ "$(field "$file" host)" = "$hosts" ] ||
      { cat "$file" >&2; fail "$file: host names per rank '$(field "$file" host)', expected '$hosts'"; }
  fi
}

only_file() {  # only_file GLOB: the single file matching GLOB (a job's output file)
  local files=()
  # shellcheck disable=SC2206
  files=($1)
  if [ ${#files[@]} -ne 1 ] || [ ! -f "${files[0]}" ]; then
    fail "expected one job output file $1, found: ${files[*]}"
  fi
  echo "${files[0]}"
}

# ---------------------------------------------------------------------------------------------
phase_srun() {
  start_cluster 1
  note "srun -n 2 --mpi=pmix mpi_probe"
  must_run "$WORK/srun.out" 60 srun -n 2 --mpi=pmix "$PROBE"
  check_probe "$WORK/srun.out" 2 "0 0" "n1 n1"
  cat "$WORK/srun.out"

  note "srun -n 4 (MpiDefault=pmix)"
  must_run "$WORK/srun4.out" 60 srun -n 4 "$PROBE"
  check_probe "$WORK/srun4.out" 4 "0 0 0 0" "n1 n1 n1 n1"

  note "a failing rank fails the step"
  local rc=0
  # shellcheck disable=SC2016  # expanded by the task's shell
  run_to "$WORK/srun-fail.out" 60 srun -n 2 bash -c 'exit $((SLURM_PROCID * 7))' || rc=$?
  [ $rc -ne 0 ] || { cat "$WORK/srun-fail.out" >&2; fail "srun returned 0 although rank 1 exited with 7"; }
  echo "srun exit status $rc"
}

phase_sbatch() {
  start_cluster 1
  note "sbatch --wait --wrap 'srun mpi_probe'"
  must_run "$WORK/sbatch-wrap.log" 90 \
    sbatch --wait --job-name=probe -n 2 --time=2 --output="$WORK/wrap-%j.out" \
    --wrap "srun --mpi=pmix '$PROBE'"
  local out
  out="$(only_file "$WORK/wrap-*.out")"
  check_probe "$out" 2 "0 0" "n1 n1"
  cat "$out"

  note "sbatch --wait tools/slurm/pretrain_cpu.sbatch (PRETRAIN=mpi_probe)"
  must_run "$WORK/sbatch-template.log" 90 \
    env MEGATRON_ROOT="$src" PRETRAIN="$PROBE" RECIPE=recipes/gpt_tiny.yaml \
    SET="training.train_iters=3 optimizer.lr=5e-4" EXTRA_ARGS="--print-recipe" \
    sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=2 --time=2 \
    --output="$WORK/template-%j.out" "$src/tools/slurm/pretrain_cpu.sbatch"
  out="$(only_file "$WORK/template-*.out")"
  check_probe "$out" 2 "0 0" "n1 n1"
  grep -q '^probe args: --recipe recipes/gpt_tiny.yaml --set training.train_iters=3 --set optimizer.lr=5e-4 --print-recipe$' "$out" ||
    { cat "$out" >&2; fail "$out: the template did not pass --recipe/--set/EXTRA_ARGS as expected"; }
  if [ "$(field "$out" cpus_per_task)" != "2 2" ] || [ "$(field "$out" omp_num_threads)" != "2 2" ]; then
    cat "$out" >&2; fail "$out: ranks did not get 2 CPUs and OMP_NUM_THREADS=2"
  fi
  grep -q '2 ranks x 2 threads' "$out" || { cat "$out" >&2; fail "$out: template header line missing"; }
  cat "$out"

  note "sbatch --wait tools/slurm/pretrain.sbatch --gpus-per-node=0 (the GPU template, no GPUs here)"
  must_run "$WORK/sbatch-gpu-template.log" 90 \
    env MEGATRON_ROOT="$src" PRETRAIN="$PROBE" SET="training.train_iters=3" \
    sbatch --wait --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=2 \
    --output="$WORK/gpu-template-%j.out" "$src/tools/slurm/pretrain.sbatch"
  out="$(only_file "$WORK/gpu-template-*.out")"
  check_probe "$out" 2 "0 0" "n1 n1"
  grep -q '^probe args: --recipe recipes/gpt_tiny.yaml --set training.train_iters=3$' "$out" ||
    { cat "$out" >&2; fail "$out: the GPU template did not pass --recipe/--set as expected"; }
  cat "$out"

  note "sbatch --wait returns the job's exit status"
  local rc=0
  run_to "$WORK/sbatch-fail.log" 90 \
    sbatch --wait --time=1 --output="$WORK/fail-%j.out" --wrap 'echo failing on purpose; exit 3' || rc=$?
  [ $rc -eq 3 ] || { cat "$WORK/sbatch-fail.log" >&2; fail "sbatch --wait returned $rc for a job that exited with 3"; }
  grep -q 'failing on purpose' "$(only_file "$WORK/fail-*.out")" || fail "failed job's output file lacks its output"
  echo "sbatch exit status $rc"
}

phase_two_nodes() {
  # Both "nodes" are this machine: Open MPI's shared-memory transport must not be used between
  # them (it crashes when they share a host name); TCP over loopback only.
  export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  local unshare=1
  unshare --uts sh -c 'hostname n0' >/dev/null 2>&1 || unshare=0

  start_cluster 2
  note "srun -N 2 --ntasks-per-node=2 mpi_probe$([ $unshare -eq 1 ] && echo ' (host names n1, n2)')"
  must_run "$WORK/two.out" 60 srun -N 2 --ntasks-per-node=2 --mpi=pmix "$PROBE"
  if [ $unshare -eq 1 ]; then
    check_probe "$WORK/two.out" 4 "0 0 1 1" "n1 n1 n2 n2" "n1 n1 n2 n2"
  else
    check_probe "$WORK/two.out" 4 "0 0 1 1" "n1 n1 n2 n2"
  fi
  [ "$(field "$WORK/two.out" slurm_localid)" = "0 1 0 1" ] ||
    { cat "$WORK/two.out" >&2; fail "SLURM_LOCALID per rank is not 0 1 0 1"; }
  cat "$WORK/two.out"

  note "sbatch --wait tools/slurm/pretrain_cpu.sbatch on 2 nodes (PRETRAIN=mpi_probe)"
  must_run "$WORK/sbatch-two.log" 90 \
    env MEGATRON_ROOT="$src" PRETRAIN="$PROBE" \
    sbatch --wait --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=2 \
    --output="$WORK/template-two-%j.out" "$src/tools/slurm/pretrain_cpu.sbatch"
  local out
  out="$(only_file "$WORK/template-two-*.out")"
  check_probe "$out" 4 "0 0 1 1" "n1 n1 n2 n2"
  cat "$out"

  if [ $unshare -eq 1 ]; then
    note "srun -N 2 --ntasks-per-node=2 mpi_probe (one shared host name)"
    SLURM_LOCAL_UNSHARE=0 start_cluster 2
    must_run "$WORK/two-shared.out" 60 srun -N 2 --ntasks-per-node=2 --mpi=pmix "$PROBE"
    local h
    h="$(hostname)"
    check_probe "$WORK/two-shared.out" 4 "0 0 1 1" "n1 n1 n2 n2" "$h $h $h $h"
    cat "$WORK/two-shared.out"
  fi
}

phase_pretrain() {
  local cmd="${SLURM_TEST_PRETRAIN_CMD:-}"
  [ -n "$cmd" ] || fail "phase pretrain needs SLURM_TEST_PRETRAIN_CMD (the pretrain command)"
  local words=() bin recipe="" set="" extra="" i
  read -r -a words <<<"$cmd"
  bin="${words[0]}"
  for ((i = 1; i < ${#words[@]}; i++)); do
    case "${words[i]}" in
      --recipe) recipe="${words[++i]:-}" ;;
      --recipe=*) recipe="${words[i]#--recipe=}" ;;
      --set) set+="${set:+ }${words[++i]:-}" ;;
      --set=*) set+="${set:+ }${words[i]#--set=}" ;;
      *) extra+="${extra:+ }${words[i]}" ;;
    esac
  done
  [ -n "$recipe" ] || fail "SLURM_TEST_PRETRAIN_CMD has no --recipe: '$cmd'"

  cd "$src"
  start_cluster 1
  note "srun -n 2 $cmd"
  # shellcheck disable=SC2086
  must_run "$WORK/pretrain-srun.out" 240 env OMP_NUM_THREADS=1 srun -n 2 --mpi=pmix $cmd
  grep -q validation "$WORK/pretrain-srun.out" ||
    { cat "$WORK/pretrain-srun.out" >&2; fail "srun pretrain: no 'validation' in its output"; }
  tail -n 5 "$WORK/pretrain-srun.out"

  note "sbatch --wait tools/slurm/pretrain_cpu.sbatch (PRETRAIN=$bin)"
  must_run "$WORK/pretrain-sbatch.log" 240 \
    env MEGATRON_ROOT="$src" PRETRAIN="$bin" RECIPE="$recipe" SET="$set" EXTRA_ARGS="$extra" \
    sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
    --output="$WORK/job-pretrain-%j.out" "$src/tools/slurm/pretrain_cpu.sbatch"
  local out
  out="$(only_file "$WORK/job-pretrain-*.out")"
  grep -q validation "$out" || { cat "$out" >&2; fail "$out: no 'validation' in the job's output"; }
  tail -n 5 "$out"
}

# wait_for SECONDS WHAT CMD...: polls CMD every 0.5 s until it succeeds; fails naming WHAT.
wait_for() {
  local secs="$1" what="$2" until_t; shift 2
  until_t=$((SECONDS + secs))
  [ $until_t -le $deadline ] || until_t=$deadline
  until "$@"; do
    [ $SECONDS -lt $until_t ] || { squeue >&2 || true; fail "waited ${secs}s for: $what"; }
    sleep 0.5
  done
}

last_iteration() {  # the highest training iteration logged in JSONL file $1 (0 when none)
  python3 -c 'import json,sys
it=0
for l in open(sys.argv[1]):
    r=json.loads(l)
    if "loss" in r and "iteration" in r: it=max(it,r["iteration"])
print(it)' "$1" 2>/dev/null || echo 0
}
iteration_at_least() { [ "$(last_iteration "$1")" -ge "$2" ]; }
job_output_has() { grep -q -- "$1" "$WORK/elastic.out" 2>/dev/null; }

# Elastic restarts (tools/slurm/pretrain_elastic.sbatch): a 2-node job loses n2 mid-run, goes on
# on n1, grows back to both nodes when n2 returns, and its loss curve is the uninterrupted
# single-process run's at the same global batch (fp32 round-off: the dp reduction order
# changes).
phase_elastic() {
  local cmd="${SLURM_TEST_PRETRAIN_CMD:-}"
  [ -n "$cmd" ] || fail "phase elastic needs SLURM_TEST_PRETRAIN_CMD (the pretrain binary first)"
  local bin="${cmd%% *}" iters=40
  export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  local set="training.train_iters=$iters training.eval_interval=0 training.micro_batch_size=2"
  set+=" training.global_batch_size=8 optimizer.schedule.warmup_iters=2 training.peak_tflops=0.1"
  cd "$src"
  note "reference: one process, $iters iterations"
  local ref_args=() kv
  for kv in $set; do ref_args+=(--set "$kv"); done
  must_run "$WORK/reference.out" 120 env OMP_NUM_THREADS=2 "$bin" --recipe recipes/gpt_tiny.yaml \
    "${ref_args[@]}" --set "logging.jsonl=$WORK/reference.jsonl"

  SLURM_LOCAL_UNSHARE=1 SLURM_LOCAL_SLURMD_TIMEOUT=3 start_cluster 2
  note "sbatch tools/slurm/pretrain_elastic.sbatch --nodes=1-2 --ntasks-per-node=2"
  set+=" checkpoint.save=$WORK/ckpt checkpoint.save_interval=4 parallel.comm_timeout_s=60"
  set+=" logging.jsonl=$WORK/run.jsonl"
  must_run "$WORK/sbatch.log" 20 env MEGATRON_ROOT="$src" PRETRAIN="$bin" SET="$set" \
    ELASTIC_POLL_S=1 ELASTIC_WAIT_S=60 \
    sbatch --nodes=1-2 --ntasks-per-node=2 --cpus-per-task=1 --time=10 \
    --output="$WORK/elastic.out" "$src/tools/slurm/pretrain_elastic.sbatch"
  wait_for 60 "the job running on 2 nodes at iteration 10" iteration_at_least "$WORK/run.jsonl" 10
  job_output_has "elastic: starting on 2 node(s) (n\[1-2\]), world 4" ||
    { cat "$WORK/elastic.out" >&2; fail "the job did not start on both nodes"; }
  note "node n2 dies at iteration $(last_iteration "$WORK/run.jsonl")"
  "$src/tools/slurm/local_cluster.sh" kill-node n2
  wait_for 120 "the job going on on n1" job_output_has "elastic: starting on 1 node(s) (n1), world 2"
  local resumed
  resumed="$(last_iteration "$WORK/run.jsonl")"
  wait_for 60 "progress on one node" iteration_at_least "$WORK/run.jsonl" $((resumed + 4))
  note "node n2 returns at iteration $(last_iteration "$WORK/run.jsonl")"
  "$src/tools/slurm/local_cluster.sh" start-node n2
  wait_for 60 "the job resubmitting itself" job_output_has "elastic: resubmitted as job"
  wait_for 120 "the grown job finishing" job_output_has "elastic: training finished"
  local out
  out="$(cat "$WORK/elastic.out")"
  # (No `sed | grep -q`: grep exiting first would fail the pipeline under pipefail.)
  local grown
  grown="$(sed -n '/elastic: resubmitted as job/,$p' <<<"$out")"
  grep -q "elastic: starting on 2 node(s) (n\[1-2\]), world 4" <<<"$grown" ||
    { echo "$out" >&2; fail "the resubmitted job did not run on both nodes"; }
  [ "$(grep -c "resharded resume: the checkpoint was saved by tp 1 pp 1 dp 4 (1 micro-batch(es) per step), this run is tp 1 pp 1 dp 2 (2 micro-batch(es)" <<<"$out")" -ge 1 ] ||
    { echo "$out" >&2; fail "no resharded resume from dp 4 to dp 2"; }
  grep -q "resharded resume: the checkpoint was saved by tp 1 pp 1 dp 2 (2 micro-batch(es) per step), this run is tp 1 pp 1 dp 4" <<<"$out" ||
    { echo "$out" >&2; fail "no resharded resume from dp 2 back to dp 4"; }
  grep "^elastic\|resharded resume" <<<"$out"
  note "loss per iteration (the last logged value of each) against the reference"
  python3 - "$WORK/reference.jsonl" "$WORK/run.jsonl" "$iters" <<'PY' || fail "the elastic run's loss curve left the reference's"
import json, sys
def losses(path):
    d = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r and "iteration" in r: d[r["iteration"]] = r["loss"]
    return d
ref, run, iters = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
worst = max(abs(run[i] - ref[i]) / abs(ref[i]) for i in range(1, iters + 1))
print(f"iterations 1..{iters}: loss {ref[1]:.4f} -> {ref[iters]:.4f}, worst relative difference {worst:.2e}")
sys.exit(0 if worst < 1e-5 and sorted(run) == list(range(1, iters + 1)) else 1)
PY
}

# Local checkpoints with replicas (checkpoint.local_interval): a 2-node job loses n2 and its
# node-local copies mid-run; the rerun on both nodes rebuilds n2's ranks from their replicas on
# n1 and its losses are the uninterrupted run's, bit for bit (same layout).
phase_local_checkpoint() {
  local cmd="${SLURM_TEST_PRETRAIN_CMD:-}"
  [ -n "$cmd" ] || fail "phase local_checkpoint needs SLURM_TEST_PRETRAIN_CMD (the pretrain binary first)"
  local bin="${cmd%% *}" iters=24 kv
  export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  local args=(--recipe recipes/gpt_tiny.yaml)
  for kv in training.train_iters=$iters training.eval_interval=0 training.micro_batch_size=2 \
            training.global_batch_size=8 optimizer.schedule.warmup_iters=2 \
            training.peak_tflops=0.1 parallel.comm_timeout_s=60; do
    args+=(--set "$kv")
  done
  local launch=(srun -N 2 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmix env OMP_NUM_THREADS=1 "$bin")
  cd "$src"
  SLURM_LOCAL_UNSHARE=1 SLURM_LOCAL_SLURMD_TIMEOUT=3 start_cluster 2
  note "reference: 2 nodes x 2 ranks, $iters iterations"
  must_run "$WORK/reference.out" 120 "${launch[@]}" "${args[@]}" --set "logging.jsonl=$WORK/reference.jsonl"
  args+=(--set checkpoint.local_interval=3 --set "checkpoint.local_dir=$WORK/local/{node}"
         --set "logging.jsonl=$WORK/run.jsonl")
  note "the same with local checkpoints every 3 steps; n2 dies mid-run"
  timeout 120 "${launch[@]}" "${args[@]}" >"$WORK/run1.out" 2>&1 &
  local step=$!
  wait_for 60 "the run at iteration 8" iteration_at_least "$WORK/run.jsonl" 8
  note "node n2 dies at iteration $(last_iteration "$WORK/run.jsonl") with its local copies"
  "$src/tools/slurm/local_cluster.sh" kill-node n2
  rm -rf "$WORK/local/n2"
  local rc=0
  wait $step || rc=$?
  [ $rc -ne 0 ] || { cat "$WORK/run1.out" >&2; fail "the run went on although n2 died"; }
  local lost_at
  lost_at="$(last_iteration "$WORK/run.jsonl")"
  [ "$lost_at" -lt $iters ] || fail "the run finished before n2 died"
  "$src/tools/slurm/local_cluster.sh" start-node n2
  note "rerun on both nodes (n2 empty)"
  must_run "$WORK/run2.out" 120 "${launch[@]}" "${args[@]}"
  grep -A4 "restored local checkpoint" "$WORK/run2.out" || { cat "$WORK/run2.out" >&2; fail "no local checkpoint restored"; }
  grep -q "rank 2 (n2): replica from rank 0 on n1" "$WORK/run2.out" &&
    grep -q "rank 3 (n2): replica from rank 1 on n1" "$WORK/run2.out" ||
    { cat "$WORK/run2.out" >&2; fail "n2's ranks were not rebuilt from their replicas on n1"; }
  python3 - "$WORK/reference.jsonl" "$WORK/run.jsonl" "$iters" <<'PY' || fail "the restored run's losses differ from the uninterrupted run's"
import json, sys
def records(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        if "loss" in r and "iteration" in r: out.append((r["iteration"], r["loss"]))
    return out
ref = dict(records(sys.argv[1]))
run = records(sys.argv[2])
iters = int(sys.argv[3])
bad = [(i, l, ref[i]) for i, l in run if l != ref[i]]
print(f"{len(run)} logged steps (iterations redone after the restore included), {len(bad)} differ")
sys.exit(0 if not bad and max(i for i, _ in run) == iters else 1)
PY
}

# ---------------------------------------------------------------------------------------------
phases=("$@")
if [ ${#phases[@]} -eq 0 ]; then
  phases=(srun sbatch two_nodes)
  [ -n "${SLURM_TEST_PRETRAIN_CMD:-}" ] && phases+=(pretrain)
fi
for p in "${phases[@]}"; do
  case "$p" in
    srun|sbatch|two_nodes|pretrain|elastic|local_checkpoint) ;;
    *) fail "unknown phase '$p' (srun, sbatch, two_nodes, pretrain, elastic, local_checkpoint)" ;;
  esac
done
preflight
for p in "${phases[@]}"; do
  WORK="$WORK_ROOT/$p"
  rm -rf "$WORK"
  mkdir -p "$WORK"
  t0=$SECONDS
  # A subshell keeps each phase's exports (SLURM_CONF, OMPI_MCA_*) and cd to itself. Not
  # `( ... ) || fail`: errexit would be ignored inside. In the background so that a signal to
  # this script runs the trap at once (it kills the phase, then stops the cluster).
  set +e
  (set -e; "phase_$p") &
  phase_pid=$!
  wait "$phase_pid"
  rc=$?
  phase_pid=""
  set -e
  [ $rc -eq 0 ] || fail "phase $p"
  note "phase $p passed ($((SECONDS - t0)) s)"
done
echo "PASS: ${phases[*]}"
