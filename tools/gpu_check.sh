#!/usr/bin/env bash
# The first minutes on a GPU machine: run the CUDA backend's checks from a bundle
# (tools/gpu_bundle.sh) and write one summary file.
#
#   gpu_check.sh --bundle DIR [--out DIR] [--bench [--backends "fused unfused"] [--peer-steps N]]
#                [--timeout S]
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
#   4. generate --device cuda on the transformers fixtures of gpu_generate_fixtures.txt (families,
#      rope, window, soft-cap, q/k-norm, MoE and MLA variants):
#      their greedy tokens against transformers' and against --device cpu
#   5. --bench: GPT-2 124M and GPT 1.3B, bf16, synthetic data, one GPU, with each attention
#      backend of --backends (model.attention_backend; default fused unfused) (tokens/s, TFLOP/s, MFU against the GPU's dense bf16 peak: GPU_PEAK_TFLOPS, else
#      the datasheet's for H100/H200/A100), the last step split op by op (logging.profile)
#   6. --bench: the same models in PyTorch on the same GPU, eager and torch.compile
#      (bench/pytorch_gpt.py; --peer-steps 0 leaves them out)
# Without a GPU the CUDA cases report skipped (never passed) and the CPU sides still run.
# Exit status: 0 when no check failed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle="" out="" bench=0 peer_steps=8 step_timeout=300 build_dir="" archs="" backends="fused unfused"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --bench) bench=1; shift ;;
    --peer-steps) peer_steps="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    --timeout) step_timeout="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}"; exit 0 ;;
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
python3 -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda,
  "cudnn", torch.backends.cudnn.version())' 2> /dev/null | tee -a "$summary"
missing=$(ldd "$bundle"/bin/* 2> /dev/null | grep "not found" | sort -u)
for lib in libcudart libcublas.so libcublasLt libcudnn.so libnccl; do
  where=$(ldd "$bundle/bin/test_unit_device" 2> /dev/null | awk -v l="$lib" 'index($1, l) == 1 {print $1, $3; exit}')
  say "  ${where:-$lib: not linked or not found}"
done
if [ -n "$missing" ]; then
  fail "libraries not found (neither in the bundle nor on LD_LIBRARY_PATH):"; echo "$missing" | tee -a "$summary"
fi

# run_gtest NAME PROGRAM FILTER: one gtest run, counted from the per-test lines of its logs. A
# test that crashes the program or hangs past the step's timeout is named, left out, and the
# tests not yet run go on in a new process (at most 6 times), so one bad case costs one case.
run_gtest() {
  local name="$1" program="$2" filter="$3" log="$out/$1.log"
  local t0=$SECONDS excluded="" done_tests="" rc=0 attempt
  : > "$log"
  for attempt in 1 2 3 4 5 6; do
    local part="$out/$name.part$attempt.log" negative="${done_tests}${excluded}"
    (cd "$tmp" && timeout -s KILL "$step_timeout" "$bundle/bin/$program" \
       "--gtest_filter=$filter${negative:+-${negative%:}}" > "$part" 2>&1)
    rc=$?
    cat "$part" >> "$log"
    # Finished tests print "[       OK ] T (n ms)", "[  FAILED  ] T (n ms)" or "[  SKIPPED ] T
    # (n ms)", parameterised ones with ", where GetParam() = ..." before the time.
    done_tests+=$(sed -nE 's/^\[ *(OK|FAILED|SKIPPED) *\] ([^ ,]+)(, where .*)? \([0-9]+ ms\)$/\2/p' "$part" | sed 's/$/:/' | tr -d '\n')
    local started last
    started=$(sed -nE 's/^\[ RUN +\] ([^ ]+)$/\1/p' "$part")
    last=$(echo "$started" | tail -1)
    rm -f "$part"
    # A clean exit, or a failing one that finished every test it started: nothing left to run.
    if [ "$rc" = 0 ] || [ -z "$last" ] || grep -qE "^\[ *(OK|FAILED|SKIPPED) *\] $last(,| \()" "$log"; then break; fi
    # (timeout sends SIGKILL: the trainer's SIGTERM handler would only end its current run.)
    say "  $name: $last $([ "$rc" = 137 ] && echo "hung past ${step_timeout} s (killed)" || echo "crashed the program (exit $rc)"); going on without it"
    echo "[  CRASHED ] $last (exit $rc)" >> "$log"
    excluded+="$last:"
  done
  local passed failed skipped crashed
  passed=$(grep -cE '^\[ +OK \] .* \([0-9]+ ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log")
  crashed=$(grep -c '^\[  CRASHED \]' "$log")
  say "$name: $passed passed, $failed failed, $crashed crashed or hung, $skipped skipped in $((SECONDS - t0)) s (log $log)"
  grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$|^\[  CRASHED \]' "$log" | sed 's/^/  /' | tee -a "$summary"
  [ "$failed" = 0 ] && [ "$crashed" = 0 ] || fail "$name: $failed failed, $crashed crashed or hung"
  [ "$passed" -gt 0 ] || [ "$skipped" -gt 0 ] || fail "$name ran no test (exit $rc)"
}
manifest_filter() {  # PROGRAM [FILE-REGEX]: the joined filters of its manifest lines
  awk -F'\t' -v p="$1" -v f="${2:-.}" '$1 == p && $2 ~ f {print $3}' "$bundle/share/test_manifest.tsv" | paste -sd:
}

bench_run() {  # NAME RECIPE --set...: pretrain's figures, the mean of the steps after two
  local name="$1" recipe="$2"; shift 2
  local jsonl="$out/bench_${name}.jsonl"
  rm -f "$jsonl"
  local sets=(--set data.mock=true --set training.device=cuda --set training.precision=bf16
              --set parallel.tensor=1 --set parallel.pipeline=1 --set parallel.data=1
              --set training.eval_iters=0 --set training.eval_interval=0
              --set checkpoint.save= --set checkpoint.save_interval=null
              --set optimizer.schedule.warmup_iters=1 --set logging.interval=1
              --set "logging.jsonl=$jsonl"
              --set model.attention_dropout=0.0 --set model.hidden_dropout=0.0)  # as the PyTorch peer
  [ -n "${peak:-}" ] && sets+=(--set "training.peak_tflops=$peak")
  if ! (cd "$bundle/src" && timeout -s KILL "$step_timeout" "$bundle/bin/pretrain" --recipe "$recipe" \
        "${sets[@]}" "$@" > "$out/bench_${name}.log" 2>&1); then
    fail "bench $name: $(tail -2 "$out/bench_${name}.log" | tr '\n' ' ')"; return
  fi
  python3 - "$jsonl" "$name" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
# After the warm-up steps (allocator, cuBLASLt heuristics), before the last (profiled) one.
steady = rows[2:-1] or rows
n = len(steady)
mean = lambda k: sum(r[k] for r in steady) / n
print(f"bench ours {sys.argv[2]}: {n} steps: {mean('tokens_per_s'):.0f} tokens/s | "
      f"{mean('tflops'):.1f} TFLOP/s | MFU {100 * mean('mfu'):.1f}% | "
      f"{1e3 * mean('step_seconds'):.1f} ms/step | loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
PY
  sed -n '/^profile of step/,/outside the ops/p' "$out/bench_${name}.log" | tee -a "$summary"
}
peer_run() {  # NAME eager|compile pytorch_gpt.py flags...
  local name="$1" mode="$2"; shift 2
  local log="$out/peer_${name}_$mode.log" args=(--device cuda --precision bf16 --vocab 50257)
  [ "$mode" = compile ] && args+=(--compile)
  [ -n "${peak:-}" ] && args+=(--peak-flops "${peak}e12")
  if ! PYTHONUNBUFFERED=1 timeout -s KILL "$step_timeout" python3 "$bundle/src/bench/pytorch_gpt.py" \
       "${args[@]}" "$@" --label "pytorch-$mode" --json "$out/peer_${name}_$mode.json" > "$log" 2>&1; then
    fail "peer $name $mode: $(tail -2 "$log" | tr '\n' ' ')"; return
  fi
  say "peer $name: $(grep '^SUMMARY' "$log" | sed 's/^SUMMARY //')"
}

say "== 2. CUDA unit tests"
run_gtest unit_device test_unit_device "$(manifest_filter test_unit_device)"
say "== 3. NCCL and communicator cases, one process"
run_gtest nccl test_parallel "$(manifest_filter test_parallel 'test_nccl|test_communicator_conformance')"

say "== 4. generate --device cuda against transformers' greedy tokens"
# The fixtures of gpu_generate_fixtures.txt (beside this script in the repository and the bundle).
generate_fixtures=$(grep -v '^#' "$here/gpu_generate_fixtures.txt")
for fixture_name in $generate_fixtures; do
  fixture="$bundle/src/tests/fixtures/hf/$fixture_name"
  read -r prompt expected <<< "$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))
print(",".join(map(str,e["greedy_prompt"])), " ".join(map(str,e["greedy"])))' "$fixture/expected.json")"
  n_new=$(echo "$expected" | wc -w)
  for device in cpu cuda; do
    log="$out/generate_${fixture_name}_$device.log"
    timeout "$step_timeout" "$bundle/bin/generate" --checkpoint "$fixture" --prompt-ids "$prompt" \
      --max-new-tokens "$n_new" --print-ids --device "$device" > "$log" 2>&1
    rc=$?
    got=$(grep -E '^[0-9]+( [0-9]+)*$' "$log" | tail -1)
    if [ "$rc" != 0 ] && [ "$device" = cuda ] && ! command -v nvidia-smi > /dev/null 2>&1; then
      say "generate $fixture_name --device cuda: skipped (no GPU): $(tail -1 "$log")"
    elif [ "$rc" != 0 ]; then
      fail "generate $fixture_name --device $device exited $rc: $(tail -2 "$log" | tr '\n' ' ')"
    elif [ "$(echo "$got" | awk -v n="$n_new" '{for (i = NF - n + 1; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "")}')" = "$expected" ]; then
      say "generate $fixture_name --device $device: equal to transformers' greedy tokens ($expected)"
    else
      fail "generate $fixture_name --device $device: '$got', transformers: '$expected'"
    fi
  done
done

if [ "$bench" = 1 ]; then
  say "== 5. training benchmark (pretrain, cuda, bf16, synthetic data, one GPU)"
  peak="${GPU_PEAK_TFLOPS:-}"
  if [ -z "$peak" ]; then  # the dense bf16 peak of the SXM parts by their datasheets
    case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)" in
      *H100*PCIe*) peak=756 ;; *H100* | *H200*) peak=989 ;; *A100*) peak=312 ;;
    esac
  fi
  say "MFU against a dense bf16 peak of ${peak:-(unknown: the trainer estimates one)} TFLOP/s"
  bench_configs=(
    "gpt2_124m recipes/gpt2_124m.yaml 12 768 12 1024 8 4 8"
    "gpt_1p3b recipes/gpt_1.3b.yaml 24 2048 16 2048 4 4 5"
  )  # name recipe layers hidden heads seq micro micro-batches-per-step steps
  # Each with the attention backends of --backends (model.attention_backend: fused is cuDNN's,
  # flash our own kernels, unfused the cuBLASLt path); the last step of each run is profiled op
  # by op (logging.profile).
  for config in "${bench_configs[@]}"; do
    read -r name recipe layers hidden heads seq micro accum steps <<< "$config"
    for backend in $backends; do
      bench_run "${name}_$backend" "$recipe" --set model.vocab_size=50257 --set "model.seq_length=$seq" \
        --set "training.micro_batch_size=$micro" --set "training.global_batch_size=$((micro * accum))" \
        --set training.recompute=none --set "training.train_iters=$steps" \
        --set "model.attention_backend=$backend" --set logging.profile=true \
        --set "logging.profile_step_start=$steps" --set "logging.profile_step_end=$((steps + 1))"
    done
  done
  if [ "$peer_steps" -gt 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
    say "== 6. the PyTorch peer on the same GPU (bench/pytorch_gpt.py: bf16 autocast, SDPA, fused AdamW)"
    for mode in eager compile; do  # the compiles last: they take a minute each
      for config in "${bench_configs[@]}"; do
        read -r name recipe layers hidden heads seq micro accum steps <<< "$config"
        peer_run "$name" "$mode" --layers "$layers" --hidden "$hidden" --heads "$heads" --seq "$seq" \
          --micro-batch "$micro" --grad-accum "$accum" --steps "$peer_steps" --warmup 3
      done
    done
  fi
fi

say "== result: $([ "$status" = 0 ] && echo ok || echo FAILED) (summary $summary)"
exit "$status"
