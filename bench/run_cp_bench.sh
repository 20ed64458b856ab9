#!/usr/bin/env bash
# Context parallelism on this CPU, side by side in one run (bench/bench_cp.cpp: a 2-layer LLaMA,
# hidden 512, 8 heads of 64, SwiGLU, flash attention, micro-batch 1, forward + backward of one
# sequence): for each sequence length, cp 1 (one process, 2 threads) and cp 2 (mpirun -np 2, one
# thread each) with each cp_comm_type (p2p, all_gather, a2a): seconds per pass, tokens/s, the
# per-rank peak activation memory and what forward keeps; then the ratios cp 2 / cp 1. Then the
# flash attention kernel alone (B 1, H 8, Dh 64, causal, fp32, forward + backward, 2 threads)
# against PyTorch 2's scaled_dot_product_attention, eager and torch.compile, same threads.
#
#   bench/run_cp_bench.sh [--seqs "8192 16384 32768"] [--iters N] [--build-dir DIR] [--out DIR]
#                         [--no-pytorch] [--torch-version V]
# Defaults: the three lengths, 1 timed pass after a warm-up (32K passes take about a minute each
# on 2 cores; the whole run about 15 minutes). Needs a build (tools/build.sh --tests builds
# bench_cp); PyTorch (PyPI, pinned) comes from bench/bench_venv.sh's environment under the build
# directory.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seqs="8192 16384 32768" iters=1 build_dir="$root/build" out_dir="" pytorch=1 torch_version=2.9.1
while [ $# -gt 0 ]; do
  case "$1" in
    --seqs) seqs="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out_dir="$2"; shift 2 ;;
    --no-pytorch) pytorch=0; shift ;;
    --torch-version) torch_version="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_cp_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out_dir" ] || out_dir="$build_dir/bench_results/cp"
mkdir -p "$out_dir"
bench="$build_dir/bin/bench_cp"
[ -x "$bench" ] || { echo "run_cp_bench.sh: $bench missing (tools/build.sh --tests)" >&2; exit 1; }
mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
results="$out_dir/results.jsonl"
: > "$results"
lscpu | grep -m1 "Model name" || true
for s in $seqs; do
  OMP_NUM_THREADS=2 "$bench" --seq "$s" --iters "$iters" | tee -a "$results"
  for comm in p2p all_gather a2a; do
    OMP_NUM_THREADS=1 mpirun "${mpirun_flags[@]}" -np 2 -x OMP_NUM_THREADS \
      "$bench" --seq "$s" --iters "$iters" --comm "$comm" | tee -a "$results"
  done
  OMP_NUM_THREADS=2 "$bench" --seq "$s" --iters 3 --attention | tee -a "$results"
done
if [ "$pytorch" = 1 ]; then
  source "$root/bench/bench_venv.sh"
  bench_venv "$build_dir" "$torch_version"
  for s in $seqs; do
    "$vpython" "$root/bench/pytorch_sdpa.py" --seq "$s" --threads 2 --iters 3 | tee -a "$results"
    "$vpython" "$root/bench/pytorch_sdpa.py" --seq "$s" --threads 2 --iters 3 --compile \
      2>/dev/null | tee -a "$results" || echo "torch.compile failed at seq $s"
  done
fi
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("\nseq     layout           tokens/s   vs cp1   act. peak MiB   vs cp1   kept MiB")
for s in sorted({r["seq"] for r in rows}):
    base = next((r for r in rows if r["seq"] == s and r.get("cp") == 1), None)
    for r in (r for r in rows if r["seq"] == s and "cp" in r):
        name = "cp1 x 2 thr" if r["cp"] == 1 else f"cp{r['cp']} {r['comm']}"
        print(f"{s:<7} {name:<16} {r['tokens_per_s']:9.1f}   {r['tokens_per_s'] / base['tokens_per_s']:5.2f}x"
              f"   {r['activation_peak_mib']:12.1f}   {r['activation_peak_mib'] / base['activation_peak_mib']:5.2f}x"
              f"   {r['saved_mib']:8.1f}")
print("\nseq     attention fwd+bwd (2 threads)   seconds   ours / it")
for s in sorted({r["seq"] for r in rows}):
    ours = next((r for r in rows if r["seq"] == s and r.get("kernel") == "flash"), None)
    for r in (r for r in rows if r["seq"] == s and "kernel" in r):
        ratio = r["seconds"] / ours["seconds"] if ours else float("nan")
        print(f"{s:<7} {r['kernel']:<31} {r['seconds']:8.3f}   {ratio:5.2f}x")
PY
