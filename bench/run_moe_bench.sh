#!/usr/bin/env bash
# Mixture of experts against the dense model of the same active parameters, side by side in one
# run on this CPU: llama_tiny (SwiGLU 688) and mixtral_tiny (8 experts of 344, top-2: the same
# MLP FLOPs per token), both through `pretrain` on the shipped corpus, one process; then
# mixtral_tiny with expert parallelism 2 (mpirun -np 2, one thread each) beside llama_tiny on
# data parallelism 2; then the PyTorch 2 peer (bench/pytorch_moe.py: the same two models, batch,
# sequence and AdamW on random tokens, fp32 as the recipes' training.precision), eager and
# torch.compile, on the threads of the one-process runs. Prints per run the median of the timed
# steps: tokens/s, TFLOP/s (Megatron's formula, the trainer's; MoE counts active parameters),
# MFU against the hardware peak the trainer measures (PyTorch rows divide by the peak of the
# `pretrain` run of the same model), for MoE the share of the step spent in dispatch and combine
# (all-to-alls, permutations, gathers, gating) and the load imbalance; then the ratios ours /
# PyTorch eager and ours / torch.compile for each model.
#
#   bench/run_moe_bench.sh [--steps N] [--warmup W] [--build-dir DIR] [--out DIR] [--no-mpi]
#                          [--no-pytorch] [--torch-version V]
# Defaults: 12 timed steps after 3 warm-up steps (torch.compile compiles in its first steps);
# about 1.5 minutes on 2 cores (--no-pytorch: under a minute). Needs the corpus (tools/prepare_corpus.sh) and a build
# (tools/build.sh); PyTorch (PyPI, pinned by --torch-version) comes from the virtual environment
# bench/bench_venv.sh makes under the build directory (shared with bench/run_train_bench.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=12 warmup=3 build_dir="$root/build" out_dir="" mpi=1 pytorch=1 torch_version=2.9.1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --no-pytorch) pytorch=0; shift ;;
    --torch-version) torch_version="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_moe_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/moe"
mkdir -p "$out_dir"
pretrain="$build_dir/bin/pretrain"
[ -x "$pretrain" ] || { echo "run_moe_bench.sh: no $pretrain (run tools/build.sh)" >&2; exit 1; }
iters=$((steps + warmup))
cd "$root"
if [ "$pytorch" = 1 ]; then
  source "$root/bench/bench_venv.sh"
  bench_venv "$build_dir" "$torch_version"
fi

# Results of an earlier run (say with mpi, or with PyTorch) never stand in for this one's.
rm -f "$out_dir"/{dense,moe,pytorch}_*.{jsonl,json,out}
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
run() {  # name, ranks, recipe, extra --set flags...
  local name="$1" ranks="$2" recipe="$3"; shift 3
  local log="$out_dir/$name.jsonl"
  rm -f "$log"
  local cmd=("$pretrain" --recipe "$recipe" --set training.train_iters="$iters"
             --set training.eval_interval=0 --set training.eval_iters=0
             --set optimizer.schedule.warmup_iters=1
             --set logging.jsonl="$log" --set logging.interval=1000 "$@")
  echo "# load before $name: $(cut -d' ' -f1 /proc/loadavg)"
  if [ "$ranks" -gt 1 ]; then
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
      "${cmd[@]}" --set training.threads=1 > "$out_dir/$name.out" 2>&1
  else
    "${cmd[@]}" > "$out_dir/$name.out" 2>&1
  fi
}
run dense_llama_tiny 1 recipes/llama_tiny.yaml
run moe_mixtral_tiny 1 recipes/mixtral_tiny.yaml
if [ "$mpi" = 1 ]; then
  run dense_llama_tiny_dp2 2 recipes/llama_tiny.yaml --set parallel.data=2
  run moe_mixtral_tiny_ep2 2 recipes/mixtral_tiny.yaml --set parallel.data=2 \
    --set parallel.expert=2
fi

# The PyTorch peer on the threads and against the peak of the one-process run of the same model.
start_field() {  # jsonl, key: the value in the trainer's start event
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "start":
        print(e[sys.argv[2]]); break' "$1" "$2"
}
if [ "$pytorch" = 1 ]; then
  for model in llama_tiny mixtral_tiny; do
    if [ "$model" = llama_tiny ]; then ours=dense_llama_tiny moe=(); else ours=moe_mixtral_tiny moe=(--moe); fi
    peak="$(start_field "$out_dir/$ours.jsonl" peak_flops)"
    threads="$(start_field "$out_dir/$ours.jsonl" threads_per_rank)"
    vocab="$(sed -n 's/.*vocab padded to \([0-9]*\).*/\1/p' "$out_dir/$ours.out" | head -1)"
    for mode in eager compile; do
      extra=(); [ "$mode" = compile ] && extra=(--compile)
      name="pytorch_${mode}_$model"
      rm -f "$out_dir/$name.json"
      echo "# load before $name: $(cut -d' ' -f1 /proc/loadavg)"
      OMP_NUM_THREADS="$threads" "$vpython" "$root/bench/pytorch_moe.py" "${moe[@]}" \
        --steps "$steps" --warmup "$warmup" --threads "$threads" --precision fp32 \
        --vocab "${vocab:-8192}" --peak-flops "$peak" "${extra[@]}" --label "$name" \
        --json "$out_dir/$name.json" > "$out_dir/$name.out" 2>&1 ||
        { echo "run_moe_bench.sh: $name failed:" >&2; tail -20 "$out_dir/$name.out" >&2; }
    done
  done
fi

python3 - "$out_dir" "$warmup" "$pytorch" <<'PY'
import json, re, statistics, sys, pathlib
out, warmup, pytorch = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
print(f"{'run':28} {'tokens/s':>10} {'TFLOP/s':>9} {'MFU %':>7} {'dispatch %':>11} {'imbalance':>10}")
rows = {}
for name in ["dense_llama_tiny", "moe_mixtral_tiny", "dense_llama_tiny_dp2", "moe_mixtral_tiny_ep2"]:
    p = out / f"{name}.jsonl"
    if not p.exists():
        continue
    steps = [json.loads(l) for l in p.read_text().splitlines() if '"iteration"' in l and '"tokens_per_s"' in l]
    timed = steps[warmup:]
    if not timed:
        continue
    med = lambda k: statistics.median(s.get(k, 0.0) for s in timed)
    rows[name] = med("tokens_per_s")
    moe = "moe_dispatch_share" in timed[0]
    share = f"{100 * med('moe_dispatch_share'):11.1f}" if moe else f"{'-':>11}"
    imb = f"{med('moe_load_imbalance'):10.2f}" if moe else f"{'-':>10}"
    print(f"{name:28} {med('tokens_per_s'):10.0f} {med('tflops'):9.4f} {100 * med('mfu'):7.1f} {share} {imb}")
# PyTorch rows: the median step, like ours (the json has every timed step).
torch_runs = {}
for model in ["llama_tiny", "mixtral_tiny"] if pytorch else []:
    for mode in ["eager", "compile"]:
        name = f"pytorch_{mode}_{model}"
        p = out / f"{name}.json"
        if not p.exists():
            print(f"{name:28} {'(failed: see ' + name + '.out)':>10}")
            continue
        r = json.loads(p.read_text())
        med_s = statistics.median(r["step_seconds"])
        rows[name] = r["global_batch"] * r["seq"] / med_s
        torch_runs[name] = r
        print(f"{name:28} {rows[name]:10.0f} {r['flops_per_step'] / med_s / 1e12:9.4f}"
              f" {100 * r['flops_per_step'] / med_s / r['peak_flops']:7.1f} {'-':>11} {'-':>10}")
for dense, moe in [("dense_llama_tiny", "moe_mixtral_tiny"), ("dense_llama_tiny_dp2", "moe_mixtral_tiny_ep2"),
                   ("pytorch_eager_llama_tiny", "pytorch_eager_mixtral_tiny"),
                   ("pytorch_compile_llama_tiny", "pytorch_compile_mixtral_tiny")]:
    if dense in rows and moe in rows:
        print(f"{moe} / {dense}: {rows[moe] / rows[dense]:.2f}x tokens/s")
for ours, model in [("dense_llama_tiny", "llama_tiny"), ("moe_mixtral_tiny", "mixtral_tiny")]:
    for mode, what in [("eager", "PyTorch eager"), ("compile", "torch.compile")]:
        peer = f"pytorch_{mode}_{model}"
        if ours in rows and peer in rows:
            print(f"{model}: ours / {what:13} = {rows[ours] / rows[peer]:.2f}x tokens/s")
# The two sides count the same FLOPs and parameters (from pretrain's "model:" line).
for ours, model in [("dense_llama_tiny", "llama_tiny"), ("moe_mixtral_tiny", "mixtral_tiny")]:
    peer = torch_runs.get(f"pytorch_eager_{model}") or torch_runs.get(f"pytorch_compile_{model}")
    log = out / f"{ours}.out"
    if peer is None or not log.exists():
        continue
    text = log.read_text()
    tf = re.search(r"([0-9.eE+-]+) TFLOP per step", text)
    npar = re.search(r"model: \w+, (\d+) parameters", text)
    print(f"{model}: TFLOP per step ours {tf.group(1) if tf else '?'} / PyTorch "
          f"{peer['flops_per_step'] / 1e12:.4g}; parameters ours {npar.group(1) if npar else '?'}"
          f" / PyTorch {peer['parameters']}; {peer['threads']} threads, torch {peer['torch_version']}")
PY
