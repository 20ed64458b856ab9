#!/usr/bin/env bash
# The first minutes on a GPU machine: run the CUDA backend's checks from a bundle
# (tools/gpu_bundle.sh) and write one summary file.
#
#   gpu_check.sh --bundle DIR [--out DIR] [--bench] [--timeout S]
#   gpu_check.sh [--build-dir DIR] [--archs "90"] [--bench]   # build the bundle here first
#
# The GPU machine needs only the NVIDIA driver and Python with PyTorch's CUDA 13 wheels: cudart,
# cuBLAS/cuBLASLt, cuDNN and NCCL are taken from the wheels' nvidia/*/lib folders (then
# /usr/local/cuda), everything else from the bundle. Steps, each logged under --out (default
# DIR/results):
#   1. machine: GPU, driver, where each CUDA library was found
#   2. every CUDA unit test (test_cuda_*, test_ops_backends*, device backends), including the
#      CUDA training-equivalence tests (GPT, LLaMA, BERT, two MoE models; fp32, bf16 vs the CPU)
#   3. the single-process NCCL and communicator cases
#   4. generate --device cuda on a transformers fixture: its greedy tokens against transformers'
#      and against --device cpu
#   5. --bench: GPT-2 124M and GPT 1.3B, bf16, synthetic data, one GPU (tokens/s, TFLOP/s, MFU)
# Without a GPU the CUDA cases report skipped (never passed) and the CPU sides still run.
# Exit status: 0 when no check failed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle="" out="" bench=0 step_timeout=300 build_dir="" archs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --bench) bench=1; shift ;;
    --timeout) step_timeout="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$bundle" ]; then  # from a checkout: build the bundle, then run it
  root="$(cd "$here/.." && pwd)"
  build_dir="${build_dir:-$root/build-cuda}"
  bundle_args=(--build-dir "$build_dir")
  [ -n "$archs" ] && bundle_args+=(--cuda-archs "$archs")
  bash "$root/tools/gpu_bundle.sh" "${bundle_args[@]}" || exit 1
  bundle="$(realpath -m "$build_dir")/gpu-bundle"
fi
[ -x "$bundle/bin/test_unit_device" ] || { echo "gpu_check.sh: $bundle is not a GPU bundle (no bin/test_unit_device)" >&2; exit 2; }
out="${out:-$bundle/results}"
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
fail() { say "FAILED: $*"; status=1; }

# ---- environment: the bundle first, then the CUDA libraries of the wheels --------------------
cuda_dirs=$(python3 - 2> /dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for sp in roots:
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "**", "lib"), recursive=True)):
        if glob.glob(os.path.join(d, "lib*.so*")):
            dirs.append(d)
print(":".join(dict.fromkeys(dirs)))
PY
)
for d in /usr/local/cuda/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && cuda_dirs="${cuda_dirs:+$cuda_dirs:}$d"
done
# shellcheck source=/dev/null
source "$bundle/env.sh"
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${cuda_dirs:+:$cuda_dirs}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}" GTEST_COLOR=no
tmp="$out/tmp"
mkdir -p "$tmp"
export TMPDIR="$tmp"

say "== gpu_check $(date -u +%FT%TZ), bundle $(cat "$bundle/share/commit"), CUDA archs $(cat "$bundle/share/cuda_archs")"
say "== 1. machine"
if command -v nvidia-smi > /dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | tee -a "$summary"
else
  say "nvidia-smi not found: no NVIDIA driver here; every CUDA case reports skipped"
fi
python3 -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda)' 2> /dev/null | tee -a "$summary"
missing=$(ldd "$bundle"/bin/* 2> /dev/null | grep "not found" | sort -u)
for lib in libcudart libcublas.so libcublasLt libcudnn.so libnccl; do
  where=$(ldd "$bundle/bin/test_unit_device" 2> /dev/null | awk -v l="$lib" 'index($1, l) == 1 {print $1, $3; exit}')
  say "  ${where:-$lib: not linked or not found}"
done
if [ -n "$missing" ]; then
  fail "libraries not found (neither in the bundle nor on LD_LIBRARY_PATH):"; echo "$missing" | tee -a "$summary"
fi

# run_gtest NAME PROGRAM FILTER: one gtest run, counted from its JSON report.
run_gtest() {
  local name="$1" program="$2" filter="$3" log="$out/$1.log" json="$out/$1.json"
  local t0=$SECONDS
  (cd "$tmp" && timeout "$step_timeout" "$bundle/bin/$program" "--gtest_filter=$filter" \
     "--gtest_output=json:$json" > "$log" 2>&1)
  local rc=$?
  local counts
  counts=$(python3 - "$json" 2> /dev/null <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = [t for s in r["testsuites"] for t in s["testsuite"]]
skipped = [t for t in cases if t.get("result") == "SKIPPED"]
failed = [t for t in cases if t.get("failures")]
print(f"{len(cases) - len(skipped) - len(failed)} passed, {len(failed)} failed, {len(skipped)} skipped")
for t in failed:
    print(f"  failed: {t['classname']}.{t['name']}")
PY
)
  say "$name: ${counts:-no report (exit $rc)} in $((SECONDS - t0)) s (log $log)"
  [ "$rc" = 0 ] || fail "$name exited $rc"
}
manifest_filter() {  # PROGRAM [FILE-REGEX]: the joined filters of its manifest lines
  awk -F'\t' -v p="$1" -v f="${2:-.}" '$1 == p && $2 ~ f {print $3}' "$bundle/share/test_manifest.tsv" | paste -sd:
}

say "== 2. CUDA unit tests"
run_gtest unit_device test_unit_device "$(manifest_filter test_unit_device)"
say "== 3. NCCL and communicator cases, one process"
run_gtest nccl test_parallel "$(manifest_filter test_parallel 'test_nccl|test_communicator_conformance')"

say "== 4. generate --device cuda against transformers' greedy tokens"
fixture="$bundle/src/tests/fixtures/hf/trained_llama"
read -r prompt expected <<< "$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]));
print(",".join(map(str,e["greedy_prompt"])), " ".join(map(str,e["greedy"])))' "$fixture/expected.json")"
n_new=$(echo "$expected" | wc -w)
for device in cpu cuda; do
  log="$out/generate_$device.log"
  timeout "$step_timeout" "$bundle/bin/generate" --checkpoint "$fixture" --prompt-ids "$prompt" \
    --max-new-tokens "$n_new" --print-ids --device "$device" > "$log" 2>&1
  rc=$?
  got=$(grep -E '^[0-9]+( [0-9]+)*$' "$log" | tail -1)
  if [ "$rc" != 0 ] && [ "$device" = cuda ] && ! command -v nvidia-smi > /dev/null 2>&1; then
    say "generate --device cuda: skipped (no GPU): $(tail -1 "$log")"
  elif [ "$rc" != 0 ]; then
    fail "generate --device $device exited $rc: $(tail -2 "$log" | tr '\n' ' ')"
  elif [ "$(echo "$got" | awk -v n="$n_new" '{for (i = NF - n + 1; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "")}')" = "$expected" ]; then
    say "generate --device $device: equal to transformers' greedy tokens ($expected)"
  else
    fail "generate --device $device: '$got', transformers: '$expected'"
  fi
done

if [ "$bench" = 1 ]; then
  say "== 5. training benchmark (pretrain, cuda, bf16, synthetic data, one GPU)"
  peak="${GPU_PEAK_TFLOPS:-}"
  bench_run() {  # name recipe extra --set arguments...
    local name="$1" recipe="$2"; shift 2
    local jsonl="$out/bench_${name}.jsonl"
    rm -f "$jsonl"
    local sets=(--set data.mock=true --set training.device=cuda --set training.precision=bf16
                --set parallel.tensor=1 --set parallel.pipeline=1 --set parallel.data=1
                --set training.eval_iters=0 --set training.eval_interval=0
                --set checkpoint.save= --set checkpoint.save_interval=null
                --set logging.interval=1 --set "logging.jsonl=$jsonl")
    [ -n "$peak" ] && sets+=(--set "training.peak_tflops=$peak")
    if ! (cd "$bundle/src" && timeout "$step_timeout" "$bundle/bin/pretrain" --recipe "$recipe" \
          "${sets[@]}" "$@" > "$out/bench_${name}.log" 2>&1); then
      fail "bench $name: $(tail -2 "$out/bench_${name}.log" | tr '\n' ' ')"; return
    fi
    # Mean over the steps after the first two (warm-up: allocator, cuBLASLt heuristics).
    python3 - "$jsonl" "$name" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
steady = rows[2:] or rows
n = len(steady)
mean = lambda k: sum(r[k] for r in steady) / n
print(f"bench {sys.argv[2]}: {n} steps: {mean('tokens_per_s'):.0f} tokens/s | "
      f"{mean('tflops'):.1f} TFLOP/s per GPU | MFU {100 * mean('mfu'):.1f}% | "
      f"loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
PY
  }
  bench_run gpt2_124m recipes/gpt2_124m.yaml --set model.vocab_size=50257 \
    --set training.micro_batch_size=8 --set training.global_batch_size=32 --set training.train_iters=8
  bench_run gpt_1p3b recipes/gpt_1.3b.yaml --set model.vocab_size=50257 \
    --set training.micro_batch_size=1 --set training.global_batch_size=8 \
    --set training.recompute=selective --set training.train_iters=6
fi

say "== result: $([ "$status" = 0 ] && echo ok || echo FAILED) (summary $summary)"
exit "$status"
