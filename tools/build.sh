#!/usr/bin/env bash
# Installs the dependencies (tools/setup.sh), configures and builds into build/.
# Extra arguments go to CMake's configure step, e.g. tools/build.sh -DMEGATRON_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
