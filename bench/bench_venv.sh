# PyTorch 2 from PyPI in a virtual environment under the build directory, for the PyTorch peers
# of the benchmarks (bench/run_train_bench.sh, bench/run_moe_bench.sh). Sourced, not run:
#   source "$root/bench/bench_venv.sh"
#   bench_venv "$build_dir" "$torch_version"    # sets vpython to the venv's interpreter
# Makes (or remakes) "$build_dir/bench-venv" unless it already holds torch==version. PYTHON
# picks the interpreter the venv is made from (default python3).
bench_venv() {
  local build_dir="$1" torch_version="$2"
  local here; here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  # torch.compile's CPU backend compiles C++ against Python.h: the interpreter needs its headers.
  local python="${PYTHON:-python3}"
  _bench_venv_has_headers() {
    "$1" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null &&
      "$1" -c 'import venv, ensurepip' 2>/dev/null
  }
  if ! _bench_venv_has_headers "$python"; then
    bash "$here/tools/apt_install.sh" python3-dev python3-venv
    python=/usr/bin/python3
  fi
  local venv="$build_dir/bench-venv"
  if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    echo "installing torch==$torch_version from PyPI into $venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "torch==$torch_version" numpy
  fi
  vpython="$venv/bin/python"
}
