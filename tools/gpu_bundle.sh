#!/usr/bin/env bash
# Builds, on a machine without a GPU, a self-contained folder for the first minutes on one:
# the CUDA test programs, pretrain, generate, the benchmarks, every shared library they need
# except the NVIDIA driver's and CUDA 13's runtime libraries (cudart, cuBLAS(Lt), cuDNN, NCCL:
# tools/gpu_check.sh --bundle finds those in PyTorch's CUDA wheels), Open MPI's components, the
# recipes, the fixtures the CUDA tests read and a small tokenized corpus.
#
#   tools/gpu_bundle.sh [--build-dir DIR] [--out DIR] [--cuda-archs "90"] [--cpu-arch ARCH]
#                       [--no-build]
#
# Defaults: build dir build-cuda/ (configured with CUDA and the tests), out DIR/gpu-bundle, archs
# the build's (Hopper, 90, unless set), CPU code for x86-64-v3 (AVX2: the GPU machine's host CPU
# is unknown here, and a -march=native build from an AVX-512 machine dies on one without it).
# --no-build packs what the build dir already holds.
# The folder must stay under 60 MiB (it travels with the working tree to the GPU machine);
# tests/bundle/check_gpu_bundle.sh checks that, and that it runs from a clean environment.
# Then, on the GPU machine: <folder>/gpu_check.sh --bundle <folder> [--bench].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-cuda" out="" archs="" cpu_arch="x86-64-v3" build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --cuda-archs) archs="$2"; shift 2 ;;
    --cpu-arch) cpu_arch="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out="${out:-$build_dir/gpu-bundle}"
limit_mib="${GPU_BUNDLE_LIMIT_MIB:-60}"  # (lowered only by the bundle test, to see it refuse)

# Libraries a GPU machine brings itself: glibc, the driver, CUDA 13's runtime libraries.
system_libs='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libcuda\.so|libnvidia-|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)'

programs=(test_unit_device test_parallel pretrain generate convert_checkpoint)
if [ "$build" = 1 ]; then
  bash "$root/tools/setup.sh" --tests
  args=(-DMEGATRON_CUDA=ON -DMEGATRON_TESTS=ON -DCMAKE_BUILD_TYPE=Release "-DMEGATRON_CPU_ARCH=$cpu_arch")
  [ -n "$archs" ] && args+=("-DCMAKE_CUDA_ARCHITECTURES=$archs")
  [ -f "$build_dir/CMakeCache.txt" ] || args+=(-G Ninja)
  cmake -S "$root" -B "$build_dir" "${args[@]}" > /dev/null
  benches=$(cd "$root/bench" && ls bench_*.cpp | sed 's/\.cpp$//')
  # shellcheck disable=SC2086
  cmake --build "$build_dir" -j "$(nproc)" --target "${programs[@]}" preprocess_data $benches
fi
grep -q "MEGATRON_WITH_CUDA:INTERNAL=ON\|megatron: CUDA backend ON" "$build_dir/CMakeCache.txt" 2> /dev/null ||
  [ -f "$build_dir/kernels/libmegatron_cuda.so" ] ||
  { echo "gpu_bundle.sh: $build_dir has no CUDA backend (configure with -DMEGATRON_CUDA=ON)" >&2; exit 1; }
# A bundle without cuDNN's fused attention would spend its GPU minutes on our slower kernels.
if [ -z "$(tr -d '[:space:]' < "$build_dir/cudnn_frontend.txt" 2> /dev/null)" ]; then
  echo "gpu_bundle.sh: $build_dir was configured without the cuDNN frontend's headers" \
       "(tools/fetch_cudnn_frontend.py needs python3 -m pip and PyPI; or pass" \
       "-DCUDNN_FRONTEND_INCLUDE_DIR=...): model.attention_backend fused would be unavailable" >&2
  exit 1
fi
for p in "${programs[@]}"; do
  [ -x "$build_dir/bin/$p" ] || { echo "gpu_bundle.sh: $build_dir/bin/$p is missing (build it, or drop --no-build)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/openmpi" "$out/share" "$out/src"
for p in "${programs[@]}"; do cp "$build_dir/bin/$p" "$out/bin/"; done
for b in "$build_dir"/bin/bench_*; do [ -x "$b" ] && cp "$b" "$out/bin/"; done

# copy_deps FILE...: the shared libraries FILE needs (ldd, with the build's own libraries found
# through their run paths), less the system's, into lib/.
copy_deps() {
  ldd "$@" 2> /dev/null | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
    [[ "$name" =~ $system_libs ]] && continue
    [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
}
copy_deps "$out"/bin/*
copy_deps "$out"/lib/*.so*  # what the copied libraries need in turn

# Open MPI starts a helper daemon (orted) for a process run without mpirun, loads its
# components and PMIx's at MPI_Init and reads its help texts: the components whose own
# dependencies are all in the bundle or the system's set come along (with the small
# libmca_common_* they share); ones that need network fabrics absent here (verbs, UCX, OFI,
# PSM) are left out, which Open MPI tolerates. hwloc's plugins (OpenCL, X11, libxml2 with ICU)
# are not needed and stay out: env.sh points hwloc at an empty folder.
orted="$(command -v orted)"
cp "$orted" "$out/bin/"
copy_deps "$out/bin/orted"
ompi_path() { ompi_info --path "$1" --parsable 2> /dev/null | sed 's/.*:\(\/.*\)/\1/'; }
# copy_components SRC_DIR DEST_DIR: the components of SRC_DIR that can load from the bundle,
# with the libraries they need (never the fabrics' or display libraries); MPI-IO, one-sided,
# OpenSHMEM and topology components stay out (nothing here uses them).
fabric_libs='^(libibverbs|librdmacm|libucp|libucs|libuct|libucm|libfabric|libpsm|libinfinipath|libnl-|libOpenCL|libX|libxml2|libicu|libcuda)'
unused_components='^mca_(io|fcoll|fs|fbtl|sharedfp|osc|topo|memheap|scoll|spml|sshmem|atomic|vprotocol)_'
skipped=0
copy_components() {
  mkdir -p "$2"
  for comp in "$1"/*.so; do
    if [[ "$(basename "$comp")" =~ $unused_components ]]; then skipped=$((skipped + 1)); continue; fi
    local needs
    needs=$(ldd "$comp" | awk '/=> \// {print $1, $3}')
    if echo "$needs" | awk '{print $1}' | grep -qE "$fabric_libs"; then
      skipped=$((skipped + 1)); continue
    fi
    local name path
    while read -r name path; do
      [[ "$name" =~ $system_libs ]] || [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
    done <<< "$needs"
    cp "$comp" "$2/"
  done
}
copy_components "$(ompi_path pkglibdir)" "$out/lib/openmpi"
pmix_dir=$(dirname "$(ldconfig -p | awk '/libpmix.so.2 / {print $NF; exit}')")
pmix_components=$(ls -d "$pmix_dir"/pmix2/lib/pmix /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix 2> /dev/null | head -1)
[ -n "$pmix_components" ] && copy_components "$pmix_components" "$out/lib/pmix"
mkdir -p "$out/share/openmpi" "$out/etc" "$out/lib/hwloc"
cp -r "$(ompi_path pkgdatadir)"/. "$out/share/openmpi/"
cp "$(ompi_path sysconfdir)"/openmpi-mca-params.conf "$out/etc/" 2> /dev/null ||
  touch "$out/etc/openmpi-mca-params.conf"
cat > "$out/env.sh" <<'ENV'
# The bundle's environment (source it): the libraries packed with xz unpacked once, the
# bundle's libraries first, Open MPI, PMIx and hwloc pointed at its folders, the tests at its
# data (tests/support/test_paths.h).
bundle_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for packed in "$bundle_dir"/lib/*.xz; do
  [ -e "$packed" ] && [ ! -f "${packed%.xz}" ] || continue
  xz -dc "$packed" > "${packed%.xz}.part" 2> /dev/null ||
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$packed" "${packed%.xz}.part" && mv "${packed%.xz}.part" "${packed%.xz}"
done
export LD_LIBRARY_PATH="$bundle_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_BINDIR="$bundle_dir/bin" OPAL_PKGDATADIR="$bundle_dir/share/openmpi"
export OPAL_SYSCONFDIR="$bundle_dir/etc"
export OMPI_MCA_mca_base_component_path="$bundle_dir/lib/openmpi"
export PMIX_PKGLIBDIR="$bundle_dir/lib/pmix"
export HWLOC_PLUGINS_PATH="$bundle_dir/lib/hwloc"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MEGATRON_TEST_SOURCE_DIR="$bundle_dir/src" MEGATRON_TEST_BINARY_DIR="$bundle_dir"
export MEGATRON_TEST_MPIEXEC=/nonexistent/mpirun  # no mpirun in the bundle: one process only
ENV

# Programs find lib/ through their run path; the copies lose the build tree's.
shopt -s nullglob
for f in "$out"/bin/* "$out"/lib/*.so* "$out"/lib/openmpi/*.so "$out"/lib/pmix/*.so; do
  chmod u+w "$f"
  case "$f" in "$out"/bin/*) patchelf --set-rpath '$ORIGIN/../lib' "$f" ;;
               "$out"/lib/openmpi/* | "$out"/lib/pmix/*) patchelf --set-rpath '$ORIGIN/..' "$f" ;;
               *) patchelf --set-rpath '$ORIGIN' "$f" ;; esac
  strip --strip-unneeded "$f" 2> /dev/null || true
done

# The one large library (oneDNN, ~39 MB: every ISA's kernels) travels packed with xz (~7 MB);
# env.sh unpacks it on first use (xz, else Python's lzma).
for f in "$out"/lib/*.so*; do
  if [ "$(stat -c %s "$f")" -gt $((8 * 1024 * 1024)) ]; then xz -6 -T2 "$f"; fi
done

# The data the checks read, under src/ as in the repository (MEGATRON_TEST_SOURCE_DIR).
mkdir -p "$out/src/tests/fixtures/hf" "$out/src/data/cache" "$out/src/tokenizers"
cp -r "$root/recipes" "$out/src/"
cp "$root/tokenizers/corpus_spm_8k.model" "$out/src/tokenizers/"
# The fixtures test_cuda_inference and gpu_check's generate step read (transformers' outputs).
for f in gpt2 $(grep -v '^#' "$root/tools/gpu_generate_fixtures.txt"); do
  cp -r "$root/tests/fixtures/hf/$f" "$out/src/tests/fixtures/hf/"
done
# A small tokenized corpus at gpt_tiny's path: the first 60 documents of the shipped one.
awk "NR <= 60" "$root"/data/corpus/*.jsonl > "$out/src/data/corpus_head.jsonl"
"$build_dir/bin/preprocess_data" --input "$out/src/data/corpus_head.jsonl" --json-keys text \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model "$root/tokenizers/corpus_spm_8k.model" \
  --append-eod --workers 2 --output-prefix "$out/src/data/cache/corpus" > /dev/null
rm "$out/src/data/corpus_head.jsonl"
cp "$build_dir/test_manifest.tsv" "$out/share/"
cp "$root/tools/gpu_check.sh" "$root/tools/gpu_generate_fixtures.txt" "$out/"
# gpu_check --bench's PyTorch peer.
mkdir -p "$out/src/bench"
cp "$root"/bench/{pytorch_gpt.py,peer_common.py} "$out/src/bench/"
git -C "$root" describe --always --dirty --abbrev=40 > "$out/share/commit" 2> /dev/null ||
  echo unknown > "$out/share/commit"  # (-dirty: packed from uncommitted changes)
cuda_archs=$(cat "$build_dir/cuda_architectures.txt" 2> /dev/null || true)  # kernels/CMakeLists.txt
echo "${cuda_archs:-unknown}" > "$out/share/cuda_archs"

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu bundle: $out, $((size_kib / 1024)) MiB (limit $limit_mib), $(ls "$out/bin" | wc -l) programs," \
     "$(ls "$out/lib" | grep -c '\.so') libraries, $(ls "$out/lib/openmpi" "$out/lib/pmix" | grep -c '\.so$') Open MPI/PMIx components" \
     "($skipped left out), CUDA archs ${cuda_archs:-unknown}"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu_bundle.sh: the bundle is over $limit_mib MiB:" >&2
  du -sk "$out"/* "$out"/lib/* | sort -rn | head -10 >&2
  exit 1
fi
