#!/usr/bin/env bash
# GPT-2 124M CPU training throughput, side by side in one run:
#   1. ours:            build/bin/bench_gpt_train                (OMP_NUM_THREADS=2)
#   2. PyTorch default: bench/pytorch_gpt.py                     (torch.set_num_threads(2))
#   3. PyTorch tuned:   the same with LD_PRELOAD=libjemalloc.so.2 and OMP_WAIT_POLICY=PASSIVE
# then a table of tokens/s, TFLOP/s (Megatron's formula), MFU (against each one's measured sgemm
# peak) and ms/step, and the ratio ours / tuned PyTorch.
#
#   bench/run_train_bench.sh [--steps N] [--warmup W] [--layers L] [--seq S] [--micro-batch B]
#                            [--threads T] [--build-dir DIR] [--out DIR] [--skip-build]
# Defaults: 6 timed steps after 2 warm-up steps of the full model (12 layers, seq 256, micro 8),
# about 6-8 minutes in all on 2 idle cores. Other processes on the machine distort the numbers:
# the load average is printed before each run; repeat when it is not near 0.
# Installs python3-torch and libjemalloc2 from Debian if missing (idempotent, like tools/setup.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=6 warmup=2 layers=12 seq=256 micro=8 threads=2
build_dir="$root/build" out_dir="" skip_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --micro-batch) micro="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
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
load() { cut -d' ' -f1-3 /proc/loadavg; }
loads=()
run() {  # name, then the command (environment included)
  local name="$1"; shift
  echo
  echo "==== $name (load average $(load)) ===="
  loads+=("$(load)")
  "$@" 2>&1 | tee "$out_dir/$name.log"
}
start=$(date +%s)
run ours env -u LD_PRELOAD -u OMP_WAIT_POLICY OMP_NUM_THREADS="$threads" \
  "$bench" "${shape[@]}" --json "$out_dir/ours.json"
run pytorch_default env -u LD_PRELOAD -u OMP_WAIT_POLICY OMP_NUM_THREADS="$threads" \
  "$python" "$root/bench/pytorch_gpt.py" "${shape[@]}" --threads "$threads" \
  --label pytorch-default --json "$out_dir/pytorch_default.json"
run pytorch_tuned env LD_PRELOAD="$jemalloc" OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$threads" \
  "$python" "$root/bench/pytorch_gpt.py" "${shape[@]}" --threads "$threads" \
  --label pytorch-tuned --json "$out_dir/pytorch_tuned.json"
loads+=("$(load)")

# ---- table ------------------------------------------------------------------------------
echo
echo "==== GPT-2 124M shape: layers $layers, seq $seq, micro-batch $micro, $threads threads;" \
  "$steps timed steps after $warmup warm-up; $(( $(date +%s) - start )) s in all ===="
"$python" - "$out_dir" "${loads[@]}" <<'EOF'
import json, os, sys
out, loads = sys.argv[1], sys.argv[2:]
rows = [("ours (megatron-cpp)", "ours"), ("PyTorch default", "pytorch_default"),
        ("PyTorch tuned (jemalloc+PASSIVE)", "pytorch_tuned")]
res = {k: json.load(open(os.path.join(out, k + ".json"))) for _, k in rows}
print(f"{'run':34} {'tokens/s':>9} {'TFLOP/s':>8} {'MFU':>6} {'ms/step':>9} {'median':>9}"
      f" {'sgemm GF/s':>10} {'peak RSS':>9}  load before")
for (label, k), ld in zip(rows, loads):
    r = res[k]
    print(f"{label:34} {r['tokens_per_s']:9.1f} {r['tflops']:8.4f} {100 * r['mfu']:5.1f}%"
          f" {1e3 * r['mean_step_seconds']:9.1f} {1e3 * r['median_step_seconds']:9.1f}"
          f" {r['peak_flops'] / 1e9:10.1f} {r['peak_rss_mib']:7.0f}Mi  {ld}")
print(f"load average after: {loads[-1]}")
ours, tuned, default = res["ours"], res["pytorch_tuned"], res["pytorch_default"]
print(f"ours / PyTorch tuned   = {ours['tokens_per_s'] / tuned['tokens_per_s']:.2f}x tokens/s")
print(f"ours / PyTorch default = {ours['tokens_per_s'] / default['tokens_per_s']:.2f}x tokens/s")
print(f"results: {out}/{{ours,pytorch_default,pytorch_tuned}}.{{json,log}}")
EOF
