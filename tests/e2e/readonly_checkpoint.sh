#!/usr/bin/env bash
# Bad luck on the file system: a checkpoint directory (checkpoint.save, then checkpoint.local_dir)
# on a read-only file system (a read-only bind mount in a private mount namespace) stops the run
# at start with an error naming the key, the path and the reason, exit status non-zero; the
# checkpoint already saved there is untouched and still resumes. Needs root (mount) and the
# tokenized corpus (ctest fixture).
#   readonly_checkpoint.sh PRETRAIN_BINARY
set -euo pipefail
bin="$1"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$src"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
args=(--recipe recipes/gpt_tiny.yaml --set training.eval_interval=0 --set training.micro_batch_size=2
      --set training.global_batch_size=4 --set optimizer.schedule.warmup_iters=1
      --set optimizer.schedule.decay_iters=4 --set "checkpoint.save=$work/ckpt"
      --set checkpoint.save_interval=2)
export OMP_NUM_THREADS=1
"$bin" "${args[@]}" --set training.train_iters=2 >"$work/first.out" 2>&1 ||
  { cat "$work/first.out" >&2; fail "the first run failed"; }
before="$(cd "$work/ckpt" && find . -type f -exec sha256sum {} + | sort)"

read_only() {  # read_only DIR CMD...: CMD with DIR read-only
  local dir="$1"; shift
  unshare --mount sh -c 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"' \
    "$dir" "$@"
}
unshare --mount true 2>/dev/null || fail "unshare --mount does not work here (needs root)"

rc=0
read_only "$work/ckpt" "$bin" "${args[@]}" --set training.train_iters=4 >"$work/ro.out" 2>&1 || rc=$?
[ $rc -ne 0 ] || { cat "$work/ro.out" >&2; fail "a read-only checkpoint.save was accepted"; }
grep -q "error: recipes/gpt_tiny.yaml: checkpoint.save: cannot open '$work/ckpt/.lock': Read-only file system" "$work/ro.out" ||
  { cat "$work/ro.out" >&2; fail "no error naming checkpoint.save and the read-only file system"; }
grep -q "^iter " "$work/ro.out" && fail "the run trained although it could not save"
[ "$(cd "$work/ckpt" && find . -type f -exec sha256sum {} + | sort)" = "$before" ] ||
  fail "the saved checkpoint changed"
echo "checkpoint.save read-only: refused at start (exit status $rc), the saved checkpoint untouched"

mkdir -p "$work/local/n1"
rc=0
read_only "$work/local" env SLURMD_NODENAME=n1 "$bin" "${args[@]}" --set training.train_iters=4 \
  --set checkpoint.local_interval=1 --set checkpoint.local_replication=0 \
  --set "checkpoint.local_dir=$work/local/{node}" >"$work/ro_local.out" 2>&1 || rc=$?
[ $rc -ne 0 ] || { cat "$work/ro_local.out" >&2; fail "a read-only checkpoint.local_dir was accepted"; }
grep -q "checkpoint.local_dir '$work/local/n1' is not writable: Read-only file system" "$work/ro_local.out" ||
  { cat "$work/ro_local.out" >&2; fail "no error naming checkpoint.local_dir"; }
echo "checkpoint.local_dir read-only: refused at start (exit status $rc)"

"$bin" "${args[@]}" --set training.train_iters=4 >"$work/resume.out" 2>&1 ||
  { cat "$work/resume.out" >&2; fail "the checkpoint no longer resumes"; }
grep -q "loaded checkpoint $work/ckpt/iter_0000002" "$work/resume.out" ||
  { cat "$work/resume.out" >&2; fail "the resume did not start from iteration 2"; }
echo "PASS: the checkpoint saved before resumes"
