#!/usr/bin/env bash
# Bad luck on the file system, in private mount namespaces (needs root) on the tokenized corpus
# (ctest fixture):
# - a checkpoint directory (checkpoint.save, then checkpoint.local_dir) on a read-only file
#   system (a read-only bind mount) stops the run at start with an error naming the key, the
#   path and the reason, exit status non-zero; the checkpoint already saved there is untouched
#   and still resumes;
# - local checkpoints on a file system that fills up (a 100 MiB tmpfs holding one of them): the
#   save that does not fit is reported and training goes on; the one before stays whole and a
#   restart resumes from it.
#   checkpoint_fs_faults.sh PRETRAIN_BINARY
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
echo "the checkpoint saved before resumes"

# A full disk under the local checkpoints: a 63 MB state per save on a 100 MiB tmpfs, so the
# second save cannot be written next to the first.
full="$work/full"
mkdir -p "$full"
unshare --mount sh -c '
  mount -t tmpfs -o size=100m tmpfs "$0" || exit 9
  "$@" --set training.train_iters=4 >"$0.first.out" 2>&1 || exit 10
  ls "$0"/n1 >"$0.listing"
  "$@" --set training.train_iters=6 >"$0.restart.out" 2>&1 || exit 11
' "$full" env SLURMD_NODENAME=n1 "$bin" --recipe recipes/gpt_tiny.yaml --set training.eval_interval=0 \
  --set training.micro_batch_size=2 --set training.global_batch_size=4 \
  --set optimizer.schedule.warmup_iters=1 --set optimizer.schedule.decay_iters=6 \
  --set checkpoint.local_interval=2 --set checkpoint.local_replication=0 \
  --set "checkpoint.local_dir=$full/{node}" || { cat "$full".*.out >&2; fail "full-disk runs failed (status $?)"; }
grep -q "local checkpoint iteration 2: " "$full.first.out" ||
  { cat "$full.first.out" >&2; fail "the first local checkpoint was not written"; }
grep -q "local checkpoint: cannot write .*owner_0.iter_4.mtl" "$full.first.out" &&
  grep -q "warning: local checkpoint of iteration 4 is incomplete .* the previous local checkpoint is kept" "$full.first.out" ||
  { cat "$full.first.out" >&2; fail "the save that did not fit was not reported"; }
grep -q "^iter  *4/4" "$full.first.out" || { cat "$full.first.out" >&2; fail "training stopped at the full disk"; }
[ "$(cat "$full.listing")" = "owner_0.iter_2.mtl" ] ||
  fail "the local directory holds '$(cat "$full.listing")', not the whole iteration-2 checkpoint alone"
grep -q "restored local checkpoint iteration 2" "$full.restart.out" ||
  { cat "$full.restart.out" >&2; fail "the restart did not resume from the kept local checkpoint"; }
echo "local checkpoints on a full disk: the save that did not fit reported, training went on, the kept one resumed"
echo PASS
