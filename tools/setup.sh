#!/usr/bin/env bash
# Installs the dependencies from Debian's registry. Idempotent: packages already present are
# skipped, so a second run costs only the dpkg queries.
#   tools/setup.sh            what the libraries and the tools need (tools/build.sh)
#   tools/setup.sh --tests    that, and what the tests, benchmarks and fuzzing add
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  ccache mold                # compiler cache (outside the tree) and a fast linker
  libdnnl-dev                # oneDNN: CPU GEMMs dispatched by the CPU's ISA (AVX2/AVX-512/AMX)
  libopenmpi-dev openmpi-bin # MPI communicator and mpirun
  libyaml-cpp-dev            # recipes
  libsentencepiece-dev sentencepiece  # tokenizer library + spm_train
  nlohmann-json3-dev         # metadata / vocab.json
  python3-pip                # CUDA builds: the cuDNN frontend's headers (tools/fetch_cudnn_frontend.py)
)
test_packages=(
  slurmctld slurmd slurm-client  # Slurm launches + the local-cluster test (tests/slurm)
  libgtest-dev libgmock-dev  # unit tests
  libbenchmark-dev           # kernel micro-benchmarks
  clang libclang-rt-dev      # libFuzzer + ASan/UBSan for the parsers' fuzz targets (tools/run_fuzz.sh)
  patchelf strace xz-utils   # tools/gpu_bundle.sh and its test (tests/bundle)
)
case "${1:-}" in
  "") ;;
  --tests) packages+=("${test_packages[@]}") ;;
  *) echo "setup.sh: unknown argument '$1' (expected --tests)" >&2; exit 2 ;;
esac
bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" "${packages[@]}"
