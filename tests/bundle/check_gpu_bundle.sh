#!/usr/bin/env bash
# The GPU bundle, checked on this machine (no GPU needed):
#   1. tools/gpu_bundle.sh packs it from the build (and fails past its 60 MiB limit);
#      then its env.sh unpacks the one library that travels xz-packed;
#   2. with only the bundle on LD_LIBRARY_PATH, ldd resolves every library of every program and
#      library inside the bundle, except glibc, the NVIDIA driver and CUDA's runtime libraries;
#   3. tools/gpu_check.sh --bundle runs from the folder in a clean environment (env -i): the
#      CUDA cases skip, the CPU sides pass (unit cases, generate equal to transformers);
#   4. no shared object is opened and no program started from outside the bundle while a test
#      program runs and MPI starts (strace), so nothing works here only because this machine
#      has the libraries installed.
#
#   check_gpu_bundle.sh BUILD_DIR WORK_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build_dir="$1" work="$2"
bundle="$work/gpu-bundle"
rm -rf "$work" && mkdir -p "$work"

echo "== 1. pack"
bash "$root/tools/gpu_bundle.sh" --build-dir "$build_dir" --out "$bundle" --no-build

# The libraries a GPU machine brings (glibc, driver, CUDA runtime); the same set as the packer's.
system_libs='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libcuda\.so|libnvidia-|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)'

if GPU_BUNDLE_LIMIT_MIB=10 bash "$root/tools/gpu_bundle.sh" --build-dir "$build_dir" --out "$work/too-big" \
     --no-build > "$work/too-big.log" 2>&1; then
  echo "FAIL: a bundle over its size limit was accepted"; exit 1
fi
grep -q "the bundle is over 10 MiB" "$work/too-big.log" || { cat "$work/too-big.log"; exit 1; }
echo "  the size limit refuses a bundle over it"

echo "== 2. ldd with only the bundle on LD_LIBRARY_PATH"
env -i PATH=/usr/bin:/bin bash -c 'source "$1/env.sh"' _ "$bundle"  # unpacks the xz-packed library
bad=0
for f in "$bundle"/bin/* "$bundle"/lib/*.so* "$bundle"/lib/openmpi/*.so; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $system_libs ]] && continue
    case "$path" in
      "$bundle"/*) ;;
      *) echo "  $f: $name resolves outside the bundle ($path)"; bad=1 ;;
    esac
  done < <(env -i LD_LIBRARY_PATH="$bundle/lib" ldd "$f" 2> /dev/null)
done
[ "$bad" = 0 ] || { echo "FAIL: libraries from outside the bundle"; exit 1; }
echo "  every non-system library resolves inside the bundle"

echo "== 3. gpu_check.sh --bundle in a clean environment"
env -i PATH=/usr/bin:/bin HOME="$work" bash "$bundle/gpu_check.sh" --bundle "$bundle" --out "$work/results"
summary="$work/results/summary.txt"
grep -q "^unit_device: [1-9][0-9]* passed, 0 failed" "$summary" || { echo "FAIL: no unit case passed"; exit 1; }
# Each fixture's generation on the CPU equals transformers' (the bundle carries the fixtures).
cpu_runs=$(grep -c "^generate [a-z0-9_]* --device cpu: " "$summary" || true)
cpu_equal=$(grep -c "^generate [a-z0-9_]* --device cpu: equal to transformers" "$summary" || true)
[ "$cpu_runs" -ge 9 ] && [ "$cpu_equal" = "$cpu_runs" ] ||
  { echo "FAIL: generate on the CPU ($cpu_equal of $cpu_runs equal to transformers)"; exit 1; }
if ! command -v nvidia-smi > /dev/null 2>&1; then
  # Without a GPU no CUDA case may pass: they report skipped.
  grep -q "^unit_device: .* [1-9][0-9]* skipped" "$summary" || { echo "FAIL: CUDA cases did not skip"; exit 1; }
fi

echo "== 4. shared objects opened at run time (strace)"
trace="$work/strace.log"
env -i PATH=/usr/bin:/bin OMP_NUM_THREADS=1 bash -c 'source "$1/env.sh"; shift; exec "$@"' _ "$bundle" \
  strace -f -qq -e trace=openat,execve -o "$trace" \
  "$bundle/bin/test_parallel" --gtest_filter='Collectives.*' > "$work/strace_run.log" 2>&1 ||
  { tail -20 "$work/strace_run.log"; echo "FAIL: test_parallel from the bundle"; exit 1; }
outside=$(grep -v ENOENT "$trace" | grep -oE '"/[^"]+\.so(\.[0-9]+)*"' | tr -d '"' | sort -u |
          grep -v "^$bundle/" | while read -r p; do
            [[ "$(basename "$p")" =~ $system_libs ]] || echo "$p"; done)
outside+=$(grep -v ENOENT "$trace" | grep -oE 'execve\("[^"]+"' | sed 's/execve("//' | sort -u | grep -v "^$bundle/" || true)
if [ -n "$outside" ]; then
  echo "FAIL: shared objects opened from outside the bundle:"; echo "$outside"; exit 1
fi
grep -q "Collectives\." "$work/strace_run.log" || { echo "FAIL: no collective case ran"; exit 1; }
echo "  MPI started (its daemon from the bundle) and every shared object came from the bundle or the system set"
echo "gpu bundle check: ok"
