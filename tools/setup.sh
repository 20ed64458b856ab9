#!/usr/bin/env bash
# Installs every build/test dependency from Debian's registry. Idempotent: packages
# already present are skipped, so a second run costs only the dpkg query.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git ca-certificates
  libdnnl-dev                # oneDNN: CPU GEMMs dispatched by the CPU's ISA (AVX2/AVX-512/AMX)
  libopenmpi-dev openmpi-bin # MPI communicator and mpirun
  slurmctld slurmd slurm-client  # Slurm launches + the local-cluster test (tests/slurm)
  libyaml-cpp-dev            # recipes
  libsentencepiece-dev sentencepiece  # tokenizer library + spm_train
  libgtest-dev libgmock-dev  # unit tests
  libbenchmark-dev           # kernel micro-benchmarks
  nlohmann-json3-dev         # metadata / vocab.json
  clang libclang-rt-dev      # libFuzzer + ASan/UBSan for the parsers' fuzz targets (tools/run_fuzz.sh)
)
bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" "${packages[@]}"
