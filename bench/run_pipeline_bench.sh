#!/usr/bin/env bash
# Pipeline schedules on this CPU, side by side in one run: a GPT of 9 layers (hidden 256, seq
# 128, tied embeddings) trained at pp 2 (mpirun -np 2, one thread per rank) under 1F1B,
# interleaved 1F1B (2 chunks per stage), ZB-H1, ZB-V and DualPipeV (2 chunks in a V), 8
# micro-batches a step; ZB-H1 and ZB-V once more with their lists planned on the pass times
# their first run measured (parallel.zero_bubble_pass_times: zb_h1_timed, zb_v_timed). For each:
# the median step time and pipeline time (first to last pass of the step, from the recorded
# timeline) and the measured bubble fraction of the steps after the first two; the mean
# forward, backward and weight-gradient pass times; the simulator's bubble for the same lists
# on those pass times (how far the model is from the measurement), and its prediction for pp 4
# and 8.
#
#   bench/run_pipeline_bench.sh [--iters N] [--rounds R] [--build-dir DIR] [--out DIR]
# Defaults: 10 iterations per schedule, the schedules run in turn 2 times (rounds: the machine's
# speed drifts; medians over all rounds), about 4 minutes in all on 2 cores. Needs a build
# (tools/build.sh) and the tokenized corpus (tools/prepare_corpus.sh). Timeline pictures of the
# last step of each run are written to the output directory (default build/bench_results/pipeline).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
iters=10 rounds=2 build_dir="$root/build" out_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_pipeline_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/pipeline"
mkdir -p "$out_dir"
bin="$build_dir/bin"
for t in pretrain pipeline_timeline; do
  [ -x "$bin/$t" ] || { echo "run_pipeline_bench.sh: $bin/$t missing (tools/build.sh)" >&2; exit 1; }
done
mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
lscpu | grep -m1 "Model name" || true
cd "$root"
# 9 layers, 6 on stage 0 and 3 with the LM head and loss (about 3.4 layers' work at vocabulary
# 8k) on stage 1: equal stages, as the simulator assumes and a careful user would split them.
common=(--recipe recipes/gpt_tiny.yaml --set model.num_layers=9 --set parallel.pipeline=2
        --set training.micro_batch_size=2 --set training.global_batch_size=16
        --set "training.train_iters=$iters" --set training.eval_interval=1000
        --set training.eval_iters=1 --set logging.interval=1 --set optimizer.schedule.warmup_iters=1)
for round in $(seq 1 "$rounds"); do
for sched in 1f1b interleaved zb_h1 zb_v dualpipe_v zb_h1_timed zb_v_timed; do
  kind="${sched%_timed}"
  extra=(--set "parallel.pipeline_schedule=$kind" --set "parallel.pipeline_layers=[6,3]")
  # Two chunks: 3 layers in each but the last virtual stage's, which has the head (V: on stage 0).
  case "$kind" in interleaved|zb_v|dualpipe_v)
    extra=(--set "parallel.pipeline_schedule=$kind" --set parallel.virtual_pipeline=2
           --set "parallel.pipeline_layers=[3,3,3,0]") ;;
  esac
  # *_timed: the greedy plans on the pass times this round's run of the schedule measured.
  if [ "$kind" != "$sched" ]; then
    times=$(python3 - "$out_dir/$kind.r$round".timeline.rank*.jsonl <<'PY'
import json, statistics, sys
t = {k: [] for k in ("forward", "backward", "weight_grad")}
for path in sys.argv[1:]:
    for line in open(path):
        e = json.loads(line)
        if e["kind"] in t:
            t[e["kind"]].append(e["end_s"] - e["start_s"])
print("[" + ",".join("%.3g" % (statistics.mean(t[k]) * 1e3) for k in t) + "]")
PY
)
    extra+=(--set "parallel.zero_bubble_pass_times=$times")
    echo "$times" > "$out_dir/$sched.r$round.plan_times"  # the simulator plans on them too
  fi
  run="$out_dir/$sched.r$round"
  rm -f "$run".timeline.rank*.jsonl "$run.log.jsonl"  # the log appends
  OMP_NUM_THREADS=1 mpirun "${mpirun_flags[@]}" -np 2 -x OMP_NUM_THREADS "$bin/pretrain" \
    "${common[@]}" "${extra[@]}" --set "logging.jsonl=$run.log.jsonl" \
    --set "logging.timeline=$run.timeline" > "$run.out" 2>&1 || { cat "$run.out"; exit 1; }
  "$bin/pipeline_timeline" --events "$run".timeline.rank*.jsonl --output "$run.svg" \
    --title "$sched pp=2 m=8 (measured, all steps)" > "$run.timeline.txt"
done
done
python3 - "$out_dir" "$bin/pipeline_timeline" "$rounds" <<'PY'
import collections, json, re, statistics, subprocess, sys
out, tool, rounds = sys.argv[1], sys.argv[2], range(1, int(sys.argv[3]) + 1)
vpp = {"1f1b": 1, "interleaved": 2, "zb_h1": 1, "zb_v": 2, "dualpipe_v": 2, "zb_h1_timed": 1,
       "zb_v_timed": 2}
kinds = ("forward", "backward", "weight_grad")
rows, stage_times = {}, {}
for s in vpp:
    steps, log = [], []
    per = collections.defaultdict(list)
    for n in rounds:
        text = open(f"{out}/{s}.r{n}.timeline.txt").read()
        steps += [(float(a), float(b)) for a, b in re.findall(
            r"step \d+: pipeline ([0-9.e+-]+) s, bubble ([0-9.e+-]+)", text)][2:]
        log += [json.loads(l) for l in open(f"{out}/{s}.r{n}.log.jsonl")
                if '"step_seconds"' in l][2:]
        # Per stage: the mean pass through the stage's chunks (all of them), by kind; and the
        # backwards without a W of their own in the step (DualPipeV's whole ones).
        for r in (0, 1):
            step = []
            def close(step):
                split = {(e["microbatch"], e["chunk"]) for e in step if e["kind"] == "weight_grad"}
                per[(r, "whole")] += [e["end_s"] - e["start_s"] for e in step
                                      if e["kind"] == "backward"
                                      and (e["microbatch"], e["chunk"]) not in split]
            for line in open(f"{out}/{s}.r{n}.timeline.rank{r}.jsonl"):
                e = json.loads(line)
                if e["kind"] not in kinds:
                    continue
                if e["kind"] == "forward" and e["microbatch"] == 0 and e["chunk"] == 0 and step:
                    close(step)
                    step = []
                step.append(e)
                per[(r, e["kind"])].append(e["end_s"] - e["start_s"])
            close(step)
    rows[s] = dict(step=statistics.median(r["step_seconds"] for r in log),
                   tokens=statistics.median(r["tokens_per_s"] for r in log),
                   pipe=statistics.median(p for p, _ in steps),
                   bubble=statistics.median(x for _, x in steps))
    mean = lambda r, k: statistics.mean(per[(r, k)]) * vpp[s] if per[(r, k)] else 0.0
    stage_times[s] = [[mean(r, k) for k in kinds + ("whole",)] for r in (0, 1)]

def simulate(sched, pp, m, f, b, w, plan=None):
    """f, b, w: one value or one per stage; b is the whole backward, w its weight part. plan:
    the F,B,W times the zero-bubble greedy plans on (None: the simulated ones)."""
    j = lambda v: ",".join(str(x) for x in v) if isinstance(v, list) else str(v)
    args = [tool, "--simulate", "--pp", str(pp), "--microbatches", str(m), "--forward-time",
            j(f), "--backward-time", j(b), "--weight-time", j(w), "--output", "/dev/null"]
    args += ["--vpp", "2"] if sched == "interleaved" else ["--schedule", sched.replace("_timed", "")]
    if plan:
        args += ["--plan-times", plan]
    line = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"bubble ([0-9.e+-]+)", line).group(1))

def stage_costs(s):
    t = stage_times[s]
    f = [x[0] for x in t]
    if s == "dualpipe_v":  # its whole backwards measured, and its W's (a split B: the rest)
        return f, [x[3] for x in t], [x[2] for x in t]
    b = [x[1] + x[2] for x in t]  # a split B plus its W is the whole backward
    w = [x[2] for x in t] if s != "1f1b" and s != "interleaved" else [x[1] / 2 for x in t]
    return f, b, w

for s, t in stage_times.items():
    print(f"{s:<13} pass times per stage (ms): " + "; ".join(
        f"stage {r}: F {x[0]*1e3:.1f} B {x[1]*1e3:.1f}" + (f" W {x[2]*1e3:.1f}" if x[2] else "")
        + (f" (whole B {x[3]*1e3:.1f})" if x[2] and x[3] else "")
        for r, x in enumerate(t)))
base = rows["1f1b"]["bubble"]
print("\npp=2 m=8 (measured)  step s   tokens/s   pipeline s   bubble   vs 1f1b   simulated   sim/measured")
for s, r in rows.items():
    # The zero-bubble lists as the runs made them: on equal times, or (_timed) on the measured
    # ones.
    costs = stage_costs(s)
    plan = "1,1,1" if s in ("zb_h1", "zb_v") else None
    if s.endswith("_timed"):
        plan = open(f"{out}/{s}.r{rounds[-1]}.plan_times").read().strip().strip("[]")
    sim = simulate(s, 2, 8, *costs, plan)
    print(f"{s:<20} {r['step']:6.3f}   {r['tokens']:8.0f}   {r['pipe']:10.3f}   {r['bubble']:6.3f}"
          f"   {r['bubble']/base:6.2f}x   {sim:9.3f}   {sim/r['bubble']:6.2f}x")
t = stage_times["zb_h1"]
f, b, w = (statistics.mean(x[i] for x in t) for i in range(3))
print(f"\npredicted bubble (simulator; zero-bubble lists planned on these times) on the zb_h1 "
      f"run's mean passes: F {f*1e3:.1f} ms, B {b*1e3:.1f} ms, W {w*1e3:.1f} ms")
print("pp   m    1f1b   interleaved(vpp2)   zb_h1   zb_v   dualpipe_v   zb_h1/1f1b   zb_v/1f1b"
      "   dualpipe_v/1f1b")
for pp in (4, 8):
    for m in (pp * 2, pp * 4):
        one, inter, h1, v, dv = (simulate(s, pp, m, f, b + w, w)
                                 for s in ("1f1b", "interleaved", "zb_h1", "zb_v", "dualpipe_v"))
        print(f"{pp:<4} {m:<4} {one:6.3f}   {inter:17.3f}   {h1:6.3f}   {v:5.3f}   {dv:10.3f}"
              f"   {h1/one:9.2f}x   {v/one:8.2f}x   {dv/one:14.2f}x")
PY
