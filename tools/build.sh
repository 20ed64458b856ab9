#!/usr/bin/env bash
# Installs the dependencies (tools/setup.sh), configures and builds into build/ (executables in
# build/bin/): by default the libraries and the tools (pretrain, preprocess_data, generate, ...),
# with --tests also the tests and the benchmarks.
#
#   tools/build.sh [--tests] [--cuda-archs "90;100"] [CMAKE_ARGS...]
#
# CUDA is built where nvcc is found (-DMEGATRON_CUDA=AUTO|ON|OFF), for --cuda-archs, else the
# compute capabilities of the GPUs nvidia-smi lists, else Hopper (90). Ninja, ccache and mold are
# used (tools/setup.sh installs them); BUILD_DIR moves the build (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0 archs="" cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests=1; shift ;;
    --cuda-archs) [ $# -ge 2 ] || { echo "build.sh: --cuda-archs needs a value, e.g. \"90\"" >&2; exit 2; }
                  archs="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
build_dir="${BUILD_DIR:-build}"
if [ "$tests" = 1 ]; then bash tools/setup.sh --tests; else bash tools/setup.sh; fi

if [ -z "$archs" ] && command -v nvidia-smi > /dev/null 2>&1; then
  archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null |
          tr -d ' .' | grep -E '^[0-9]+$' | sort -u | paste -sd ';' || true)
fi
[ -n "$archs" ] && cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$archs")
# Ninja for a new build directory; an existing one keeps the generator it was made with, and
# its tests (a build without --tests leaves them defined where they were).
if [ "$tests" = 1 ]; then
  cmake_args+=(-DMEGATRON_TESTS=ON)
elif [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake_args+=(-DMEGATRON_TESTS=OFF)
fi
[ -f "$build_dir/CMakeCache.txt" ] || cmake_args+=(-G Ninja)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
if [ "$tests" = 1 ]; then
  cmake --build "$build_dir" -j "$(nproc)"
else
  cmake --build "$build_dir" -j "$(nproc)" --target megatron_tools
fi
