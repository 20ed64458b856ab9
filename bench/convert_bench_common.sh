# Sourced by the checkpoint-conversion benchmarks (run_hf_convert_bench.sh,
# run_megatron_convert_bench.sh): their flags, their checks and a scratch folder removed on exit,
# and measure(), which times a command and reports its peak RSS.
#   defaults: build, work, layers set before sourcing; label_width optional.
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
[ -x "$build/bin/bench_hf_random_checkpoint" ] ||
  { echo "needs $build/bin/bench_hf_random_checkpoint (tools/build.sh --tests)" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
measure() {  # label, command...
  local label="$1"; shift
  /usr/bin/time -v "$@" > "$work/$label.out" 2> "$work/$label.time" ||
    { echo "$label failed:" >&2; grep -v '^\s' "$work/$label.time" | tail -5 >&2; exit 1; }
  local rss secs
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$work/$label.time")
  secs=$(awk -F': ' '/Elapsed/ {print $2}' "$work/$label.time")
  printf "%-${label_width:-8}s wall %s, peak RSS %.0f MiB\n" "$label" "$secs" \
    "$(echo "$rss / 1024" | bc -l)"
}
