#!/usr/bin/env bash
# libFuzzer campaign over the parsers (tests/fuzz): builds the targets with clang, ASan and UBSan
# into build-fuzz/ and runs each on a scratch copy of its seed corpus (tests/fuzz/corpus/<name>),
# two at a time. A crash, sanitizer report, leak or hang (over --timeout s on one input) stops
# that target and leaves the input in the output directory; the summary lists executions and
# findings per target.
#
#   tools/run_fuzz.sh [--runs N] [--seconds S] [--targets "fuzz_recipe ..."] [--out DIR]
# Defaults: 1,000,000 executions per target (--seconds caps the time instead). Needs clang
# with libFuzzer (Debian: clang, libclang-rt-dev / clang's compiler-rt).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=1000000 seconds=0 out="$root/build-fuzz/campaign" timeout=10
targets="fuzz_idx_reader fuzz_safetensors fuzz_checkpoint_metadata fuzz_recipe fuzz_jsonl fuzz_tokenizer_files fuzz_tokenizer_json fuzz_sft_jsonl fuzz_local_shard fuzz_pickle fuzz_zip_reader fuzz_distcp"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run_fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out=$(realpath -m "$out")  # the targets run inside their findings directories
command -v clang++ > /dev/null || { echo "run_fuzz.sh: clang++ not found (apt install clang)" >&2; exit 1; }
generator=(); [ -f "$root/build-fuzz/CMakeCache.txt" ] || generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-fuzz" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMEGATRON_CUDA=OFF -DMEGATRON_FUZZ=ON -DMEGATRON_WERROR=OFF > /dev/null || exit 1
# shellcheck disable=SC2086
cmake --build "$root/build-fuzz" -j "$(nproc)" --target $targets > "$root/build-fuzz/fuzz_build.log" 2>&1 ||
  { tail -20 "$root/build-fuzz/fuzz_build.log"; exit 1; }
mkdir -p "$out"
run_one() {
  local t=$1 dir="$out/$t"
  rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/findings"
  cp "$root/tests/fuzz/corpus/$t/"* "$dir/corpus/"
  local limit=(-runs="$runs")
  [ "$seconds" != 0 ] && limit=(-max_total_time="$seconds")
  (cd "$dir/findings" && "$root/build-fuzz/bin/$t" "$dir/corpus" "${limit[@]}" -timeout="$timeout" \
     -rss_limit_mb=4096 -print_final_stats=1 > "$dir/log" 2>&1)
  echo $? > "$dir/rc"
}
n=0
for t in $targets; do
  run_one "$t" &
  n=$((n + 1))
  [ $((n % 2)) = 0 ] && wait
done
wait
status=0
printf '%-26s %12s %10s %s\n' target executions exec/s result
for t in $targets; do
  dir="$out/$t" rc=$(cat "$out/$t/rc")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  findings=$(ls "$dir/findings" 2> /dev/null | wc -l)
  result="ok (0 crashes, 0 sanitizer reports, 0 hangs)"
  if [ "$rc" != 0 ] || [ "$findings" != 0 ]; then
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY' "$dir/log") -> $dir/findings"
    status=1
  fi
  printf '%-26s %12s %10s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
done
exit $status
