#!/usr/bin/env bash
# logging.straggler_interval in a real run: pretrain under mpirun (2 ranks, data parallel) on the
# shipped corpus writes a straggler line to stdout and "stragglers" events to its JSONL log every
# 2 steps; tools/straggler_report turns the log into a per-rank table (both ranks, their busy
# time and ratio) and an SVG with a bar per rank; a log with a broken line is refused naming the
# file and line, and one without reports says how to get them.
# usage: straggler_report.sh PRETRAIN_BINARY STRAGGLER_REPORT_BINARY MPIEXEC WORK_DIR
set -euo pipefail
pretrain=$1 report=$2 mpiexec=$3 work=$4/straggler_report
src="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe -n 2 "$pretrain" \
  --recipe recipes/gpt_tiny.yaml --set parallel.data=2 --set training.train_iters=4 \
  --set optimizer.schedule.warmup_iters=1 --set training.eval_interval=0 \
  --set training.eval_iters=0 --set logging.straggler_interval=2 --set training.threads=1 \
  --set "logging.jsonl=$work/log.jsonl" > "$work/out.log" 2>&1 || { tail -5 "$work/out.log"; fail "pretrain"; }
[ "$(grep -c '^stragglers, iterations' "$work/out.log")" = 2 ] || fail "expected 2 straggler lines"
[ "$(grep -c '"event":"stragglers"' "$work/log.jsonl")" = 2 ] || fail "expected 2 JSONL events"
"$report" --log "$work/log.jsonl" --output "$work/ranks.svg" --title 'gpt_tiny <dp 2>' \
  > "$work/table.txt" || fail "straggler_report"
cat "$work/table.txt"
grep -q '^2 reports, iterations 1-4, 2 ranks' "$work/table.txt" || fail "summary line"
for r in 0 1; do
  grep -qE "^ +$r +[0-9.]+ " "$work/table.txt" || fail "no row for rank $r"
  grep -q ">rank $r<" "$work/ranks.svg" || fail "no bar for rank $r"
done
grep -q 'gpt_tiny &lt;dp 2&gt;' "$work/ranks.svg" || fail "title not escaped"
# Bad input: a broken line is named; a log without reports says why.
{ head -1 "$work/log.jsonl"; echo '{"event": "stragglers", "first_iteration": 1'; } > "$work/bad.jsonl"
if "$report" --log "$work/bad.jsonl" > "$work/bad.out" 2>&1; then fail "a broken log was accepted"; fi
grep -q "bad.jsonl:2" "$work/bad.out" || { cat "$work/bad.out"; fail "the broken line is not named"; }
head -1 "$work/log.jsonl" > "$work/none.jsonl"
if "$report" --log "$work/none.jsonl" > "$work/none.out" 2>&1; then fail "a log without reports passed"; fi
grep -q "straggler_interval" "$work/none.out" || { cat "$work/none.out"; fail "no hint"; }
echo "straggler_report: ok"
