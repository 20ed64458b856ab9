#!/usr/bin/env bash
# GPT-2 124M CPU training throughput, side by side in one run:
#   ours:            build/bin/bench_gpt_train                (OMP_NUM_THREADS=2)
#   PyTorch default: bench/pytorch_gpt.py                     (torch.set_num_threads(2))
#   PyTorch tuned:   the same with LD_PRELOAD=libjemalloc.so.2 and OMP_WAIT_POLICY=PASSIVE
# then a table of tokens/s, TFLOP/s (Megatron's formula), MFU (against each one's measured sgemm
# peak) and ms/step, and the ratio ours / tuned PyTorch.
#
#   bench/run_train_bench.sh [--steps N] [--warmup W] [--rounds R] [--layers L] [--seq S]
#                            [--micro-batch B] [--threads T] [--nice N] [--build-dir DIR]
#                            [--out DIR] [--skip-build]
# Defaults: 6 timed steps after 2 warm-up steps of the full model (12 layers, seq 256, micro 8),
# one round: about 6-7 minutes in all on 2 idle cores. --rounds R runs the three R times,
# interleaved, and pools their timed steps (fairer when the load changes during the run).
# Other processes distort the numbers: the load average and the idle share of the CPUs are
# printed before each run; "best" (the fastest step) is the least disturbed figure. On a shared
# machine, --nice -15 (root only) runs each of the three in its own session with that autogroup
# and process niceness, so they take most of the CPUs from other sessions' work (compiles).
# The environment passes through to all three runs, e.g. OPENBLAS_CORETYPE=SkylakeX (OpenBLAS
# 0.3.21 picks its AVX2 Haswell kernels on Sapphire Rapids) applies to ours and PyTorch alike.
# Installs python3-torch and libjemalloc2 from Debian if missing (idempotent, like tools/setup.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=6 warmup=2 rounds=1 layers=12 seq=256 micro=8 threads=2 niceness=0
build_dir="$root/build" out_dir="" skip_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --micro-batch) micro="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --nice) niceness="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_train_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results"
mkdir -p "$out_dir"

# ---- dependencies -----------------------------------------------------------------------
packages=(python3-torch libjemalloc2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
python=/usr/bin/python3  # Debian's interpreter: python3-torch is installed for it
jemalloc="$(dpkg -L libjemalloc2 | grep -m1 '/libjemalloc\.so\.2$')"
[ -f "$jemalloc" ] || { echo "run_train_bench.sh: libjemalloc.so.2 not found" >&2; exit 1; }

# ---- build ------------------------------------------------------------------------------
bench="$build_dir/bin/bench_gpt_train"
if [ "$skip_build" -eq 0 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build_dir" -DMEGATRON_CUDA=OFF
  fi
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
run() {  # name, then the command (environment included)
  local name="$1"; shift
  local cond; cond="$(conditions)"
  echo
  echo "==== $name (before: $cond) ===="
  echo "$cond" > "$out_dir/$name.cond"
  if [ "$niceness" -ne 0 ]; then
    # Own session, hence own scheduler autogroup, whose weight is what competes with the other
    # sessions' work (plain nice only ranks processes within one autogroup).
    setsid --wait bash -c 'echo "$0" > /proc/self/autogroup || exit 1; exec nice -n "$0" "$@"' \
      "$niceness" "$@" 2>&1 | tee "$out_dir/$name.log"
  else
    "$@" 2>&1 | tee "$out_dir/$name.log"
  fi
}
rm -f "$out_dir"/{ours,pytorch_default,pytorch_tuned}.r*.{json,log,cond}
start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  run "ours.r$r" env -u LD_PRELOAD -u OMP_WAIT_POLICY OMP_NUM_THREADS="$threads" \
    "$bench" "${shape[@]}" --json "$out_dir/ours.r$r.json"
  run "pytorch_default.r$r" env -u LD_PRELOAD -u OMP_WAIT_POLICY OMP_NUM_THREADS="$threads" \
    "$python" "$root/bench/pytorch_gpt.py" "${shape[@]}" --threads "$threads" \
    --label pytorch-default --json "$out_dir/pytorch_default.r$r.json"
  run "pytorch_tuned.r$r" env LD_PRELOAD="$jemalloc" OMP_WAIT_POLICY=PASSIVE \
    OMP_NUM_THREADS="$threads" \
    "$python" "$root/bench/pytorch_gpt.py" "${shape[@]}" --threads "$threads" \
    --label pytorch-tuned --json "$out_dir/pytorch_tuned.r$r.json"
done
after="$(conditions)"

# ---- table ------------------------------------------------------------------------------
echo
echo "==== GPT-2 124M shape: layers $layers, seq $seq, micro-batch $micro, $threads threads;" \
  "$rounds round(s) of $steps timed steps after $warmup warm-up, nice $niceness;" \
  "$(( $(date +%s) - start )) s in all ===="
"$python" - "$out_dir" "$rounds" "$after" <<'EOF'
import json, os, statistics, sys
out, rounds, after = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [("ours (megatron-cpp)", "ours"), ("PyTorch default", "pytorch_default"),
        ("PyTorch tuned (jemalloc+PASSIVE)", "pytorch_tuned")]
agg = {}
for label, key in rows:
    runs = [json.load(open(os.path.join(out, f"{key}.r{r}.json"))) for r in range(1, rounds + 1)]
    conds = [open(os.path.join(out, f"{key}.r{r}.cond")).read().strip()
             for r in range(1, rounds + 1)]
    steps = [s for run in runs for s in run["step_seconds"]]
    tokens = runs[0]["micro_batch"] * runs[0]["seq"]
    flops = runs[0]["flops_per_step"]
    peak = max(run["peak_flops"] for run in runs)
    mean_s = sum(steps) / len(steps)
    agg[key] = dict(label=label, tok=tokens / mean_s, best_tok=tokens / min(steps),
                    tflops=flops / mean_s / 1e12, mfu=flops / mean_s / peak, ms=1e3 * mean_s,
                    median=1e3 * statistics.median(steps), best=1e3 * min(steps), peak=peak,
                    rss=max(run["peak_rss_mib"] for run in runs), cond="; ".join(conds))
print(f"{'run':33} {'tokens/s':>8} {'best':>6} {'TFLOP/s':>8} {'MFU':>6} {'ms/step':>8}"
      f" {'median':>8} {'best':>8} {'sgemm GF/s':>10} {'peak RSS':>9}  conditions before")
for _, key in rows:
    a = agg[key]
    print(f"{a['label']:33} {a['tok']:8.1f} {a['best_tok']:6.1f} {a['tflops']:8.4f}"
          f" {100 * a['mfu']:5.1f}% {a['ms']:8.1f} {a['median']:8.1f} {a['best']:8.1f}"
          f" {a['peak'] / 1e9:10.1f} {a['rss']:7.0f}Mi  {a['cond']}")
print(f"conditions after: {after}")
print("tokens/s = tokens of all timed steps / their total time; best = the fastest step;"
      " MFU against the better sgemm peak measured before/after each run")
ours = agg["ours"]
for key, name in (("pytorch_tuned", "PyTorch tuned"), ("pytorch_default", "PyTorch default")):
    o = agg[key]
    print(f"ours / {name:15} = {ours['tok'] / o['tok']:.2f}x tokens/s"
          f" (best step {ours['best_tok'] / o['best_tok']:.2f}x)")
print(f"results: {out}/{{ours,pytorch_default,pytorch_tuned}}.r*.{{json,log}}")
EOF
