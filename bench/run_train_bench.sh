#!/usr/bin/env bash
# GPT-2 124M CPU training throughput against PyTorch 2, side by side in one run:
#   ours  fp32 / bf16:              build/bin/bench_gpt_train [--precision bf16]
#   PyTorch eager fp32 / bf16:      bench/pytorch_gpt.py (SDPA, fused AdamW; bf16 = autocast)
#   PyTorch torch.compile fp32/bf16: the same with --compile
# PyTorch comes from PyPI (pinned, --torch-version) in a virtual environment this script makes
# under the build directory. Every run uses the same threads; MFU of every row is against the
# hardware peak bench_gpt_train measures for that precision (register-only FMA / AMX loops), so
# all rows divide by the same number. Prints the CPU, its ISA, the GEMM path, both peaks, each
# run's tokens/s, TFLOP/s (Megatron's formula), MFU and the ratios.
#
#   bench/run_train_bench.sh [--steps N] [--warmup W] [--rounds R] [--layers L] [--seq S]
#                            [--micro-batch B] [--threads T] [--precisions "fp32 bf16"]
#                            [--torch-version V] [--build-dir DIR] [--out DIR] [--skip-build]
#                            [--report-only]   (the table from the results already in --out)
# Defaults: 6 timed steps after 3 warm-up steps (torch.compile compiles in its first steps),
# 12 layers, seq 256, micro-batch 8, threads = all cores: about 15 minutes on 2 cores.
# --rounds R repeats the six runs R times, interleaved, and pools their timed steps. Other
# processes distort the numbers: the load and idle share are printed before each run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=6 warmup=3 rounds=1 layers=12 seq=256 micro=8 threads="$(nproc)"
precisions="fp32 bf16" torch_version=2.9.1
build_dir="$root/build" out_dir="" skip_build=0 report_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --micro-batch) micro="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --precisions) precisions="$2"; shift 2 ;;
    --torch-version) torch_version="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --report-only) report_only=1; skip_build=1; shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_train_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for p in $precisions; do
  case "$p" in fp32|bf16) ;; *) echo "run_train_bench.sh: --precisions: fp32 or bf16, got '$p'" >&2; exit 2 ;; esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results"
mkdir -p "$out_dir"

# ---- PyTorch 2 from PyPI in a virtual environment (bench/bench_venv.sh) -----------------
source "$root/bench/bench_venv.sh"
bench_venv "$build_dir" "$torch_version"

# ---- build ------------------------------------------------------------------------------
bench="$build_dir/bin/bench_gpt_train"
if [ "$skip_build" -eq 0 ]; then
  bash "$root/tools/setup.sh" --tests  # the benchmarks are defined with the tests
  new_dir=(); [ -f "$build_dir/CMakeCache.txt" ] || new_dir=(-G Ninja -DMEGATRON_CUDA=OFF)
  cmake -S "$root" -B "$build_dir" "${new_dir[@]}" -DMEGATRON_TESTS=ON > /dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target bench_gpt_train
fi
[ -x "$bench" ] || { echo "run_train_bench.sh: $bench missing (build it or drop --skip-build)" >&2; exit 1; }

# ---- runs -------------------------------------------------------------------------------
shape=(--steps "$steps" --warmup "$warmup" --layers "$layers" --seq "$seq" --micro-batch "$micro")
idle() {  # percent of CPU time idle over one second
  local a b
  read -r -a a < /proc/stat; sleep 1; read -r -a b < /proc/stat
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (b[4] + b[5] - a[4] - a[5]) / total : 0 ))
}
conditions() { echo "load $(cut -d' ' -f1-3 /proc/loadavg), $(idle)% idle"; }
run() {  # name, then the command
  local name="$1"; shift
  local cond; cond="$(conditions)"
  echo
  echo "==== $name (before: $cond) ===="
  echo "$cond" > "$out_dir/$name.cond"
  "$@" 2>&1 | tee "$out_dir/$name.log"
}
peak_of() { "$vpython" -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_flops'])" "$1"; }
start=$(date +%s)
[ "$report_only" -eq 1 ] || rm -f "$out_dir"/{ours,eager,compile}_*.r*.{json,log,cond}
[ "$report_only" -eq 1 ] && rounds_to_run=0 || rounds_to_run="$rounds"
for r in $(seq 1 "$rounds_to_run"); do
  for p in $precisions; do
    run "ours_$p.r$r" env OMP_NUM_THREADS="$threads" "$bench" "${shape[@]}" --precision "$p" \
      --json "$out_dir/ours_$p.r$r.json"
    peak="$(peak_of "$out_dir/ours_$p.r$r.json")"
    for mode in eager compile; do
      extra=(); [ "$mode" = compile ] && extra=(--compile)
      run "${mode}_$p.r$r" env OMP_NUM_THREADS="$threads" "$vpython" "$root/bench/pytorch_gpt.py" \
        "${shape[@]}" --threads "$threads" --precision "$p" "${extra[@]}" --peak-flops "$peak" \
        --label "pytorch-$mode-$p" --json "$out_dir/${mode}_$p.r$r.json"
    done
  done
done
after="$(conditions)"

# ---- table ------------------------------------------------------------------------------
echo
echo "==== GPT-2 124M shape: layers $layers, seq $seq, micro-batch $micro, $threads threads;" \
  "$rounds round(s) of $steps timed steps after $warmup warm-up; $(( $(date +%s) - start )) s ===="
"$vpython" - "$out_dir" "$rounds" "$after" "$precisions" <<'EOF'
import json, os, statistics, sys
out, rounds, after, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
def load(key):
    runs = [json.load(open(os.path.join(out, f"{key}.r{r}.json"))) for r in range(1, rounds + 1)]
    conds = [open(os.path.join(out, f"{key}.r{r}.cond")).read().strip() for r in range(1, rounds + 1)]
    if any("unmeasured" in run for run in runs):  # e.g. PyTorch bf16 without bf16 instructions
        return dict(first=runs[0], unmeasured=runs[0]["unmeasured"])
    steps = [s for run in runs for s in run["step_seconds"]]
    tokens = runs[0]["micro_batch"] * runs[0]["seq"]
    flops = runs[0]["flops_per_step"]
    peak = max(run["peak_flops"] for run in runs)
    mean_s = sum(steps) / len(steps)
    gemm = max(run.get("gemm_flops", run.get("mm_flops", 0)) for run in runs)
    return dict(first=runs[0], tok=tokens / mean_s, best_tok=tokens / min(steps),
                tflops=flops / mean_s / 1e12, mfu=flops / mean_s / peak,
                of_gemm=flops / mean_s / gemm if gemm else 0, ms=1e3 * mean_s,
                median=1e3 * statistics.median(steps), peak=peak, gemm=gemm,
                rss=max(run["peak_rss_mib"] for run in runs), cond="; ".join(conds))
agg = {}
for p in precisions:
    for impl in ("ours", "eager", "compile"):
        agg[(impl, p)] = load(f"{impl}_{p}")
first = agg[("ours", precisions[0])]["first"]
print(f"cpu: {first['cpu']}; isa: {first['isa']}")
print(f"gemm: {first['gemm']}")
for p in precisions:
    o = agg[("ours", p)]
    print(f"hardware peak {p}: {o['peak'] / 1e9:.1f} GFLOP/s ({o['first']['peak_isa']}, {first['threads']} threads)")
print(f"torch {agg[('eager', precisions[0])]['first']['torch_version']}")
names = {"ours": "ours (megatron-cpp)", "eager": "PyTorch eager", "compile": "PyTorch torch.compile"}
print(f"{'run':28} {'prec':>5} {'tokens/s':>9} {'best':>7} {'TFLOP/s':>8} {'MFU':>6} {'of gemm':>8}"
      f" {'ms/step':>8} {'median':>8} {'RSS MiB':>8}  conditions before")
for p in precisions:
    for impl in ("ours", "eager", "compile"):
        a = agg[(impl, p)]
        if "unmeasured" in a:
            print(f"{names[impl]:28} {p:>5} {'n/a':>9}  {a['unmeasured']}")
            continue
        print(f"{names[impl]:28} {p:>5} {a['tok']:9.1f} {a['best_tok']:7.1f} {a['tflops']:8.4f}"
              f" {100 * a['mfu']:5.1f}% {100 * a['of_gemm']:7.1f}% {a['ms']:8.1f} {a['median']:8.1f}"
              f" {a['rss']:8.0f}  {a['cond']}")
print(f"conditions after: {after}")
print("MFU: against the hardware peak of the row's precision; of gemm: against the GEMM rate the"
      " same library reaches (ours: oneDNN; PyTorch: torch.mm)")
for p in precisions:
    o = agg[("ours", p)]
    for impl in ("compile", "eager"):
        t = agg[(impl, p)]
        if "unmeasured" in t:
            print(f"{p}: ours / {names[impl]:22} = n/a ({t['unmeasured']})")
            continue
        print(f"{p}: ours / {names[impl]:22} = {o['tok'] / t['tok']:.2f}x tokens/s"
              f" (best step {o['best_tok'] / t['best_tok']:.2f}x)")
if "fp32" in precisions and "bf16" in precisions:
    for impl in ("ours", "eager", "compile"):
        if any("unmeasured" in agg[(impl, q)] for q in ("bf16", "fp32")):
            continue
        print(f"bf16 / fp32, {names[impl]:22} = "
              f"{agg[(impl, 'bf16')]['tok'] / agg[(impl, 'fp32')]['tok']:.2f}x tokens/s")
print(f"results: {out}/{{ours,eager,compile}}_*.r*.{{json,log}}")
EOF
