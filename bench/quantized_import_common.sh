# Sourced by the quantized-import benchmarks (run_hf_fp8_import_bench.sh,
# run_hf_mxfp4_import_bench.sh): set before sourcing `root`, `work` (the default scratch
# folder), `generator` (the bench/*.py that writes the random directory), `config` (its
# config.json) and `largest` (what the peak is compared with, for the last line). Writes the
# directory with torch from bench/bench_venv.sh, imports it into an ep 2 native checkpoint (fp32)
# under /usr/bin/time, prints the import's wall time and peak RSS, and removes what it wrote.
build="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
source "$root/bench/bench_venv.sh"
bench_venv "$build" 2.9.1  # sets vpython
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
"$vpython" "$generator" "$work/hf" "$config"
du -sh "$work/hf"
/usr/bin/time -v "$build/bin/convert_checkpoint" --from-hf "$work/hf" --to "$work/native" \
  --expert-parallel 2 > "$work/import.out" 2> "$work/import.time"
cat "$work/import.out"
rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$work/import.time")
secs=$(awk -F': ' '/Elapsed/ {print $2}' "$work/import.time")
printf 'import wall %s, peak RSS %.0f MiB (largest tensor, %s)\n' \
  "$secs" "$(echo "$rss / 1024" | bc -l)" "$largest"
du -sh "$work/native"
