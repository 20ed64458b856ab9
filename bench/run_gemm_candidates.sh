#!/usr/bin/env bash
# The GEMM libraries we could use, measured side by side on this CPU (bench_gemm_candidates.cpp):
# oneDNN fp32 and bf16 (what the project uses), OpenBLAS with the core it picks itself and with
# the core forced from the CPU's feature bits, BLIS, our packed GEMM; first the ceiling their
# inner loop can reach here (microkernel). Installs the OpenBLAS and BLIS runtime libraries from
# Debian if missing (they are loaded with dlopen, never linked by the project).
#   bench/run_gemm_candidates.sh [--threads T] [--build-dir DIR] [--skip-build]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
threads="$(nproc)" build_dir="$root/build" skip_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    -h|--help) sed -n '2,6p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_gemm_candidates.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bash "$root/tools/apt_install.sh" libopenblas0-openmp libblis4-openmp
if [ "$skip_build" -eq 0 ]; then
  bash "$root/tools/setup.sh" --tests  # the benchmarks are defined with the tests
  new_dir=(); [ -f "$build_dir/CMakeCache.txt" ] || new_dir=(-G Ninja -DMEGATRON_CUDA=OFF)
  cmake -S "$root" -B "$build_dir" "${new_dir[@]}" -DMEGATRON_TESTS=ON > /dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target bench_gemm_candidates
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo)"
for c in microkernel onednn openblas openblas-forced blis packed onednn-bf16 packed-bf16; do
  OMP_NUM_THREADS="$threads" "$build_dir/bin/bench_gemm_candidates" --candidate "$c"
done | tee /dev/stderr | grep RESULT
