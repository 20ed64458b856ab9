#!/usr/bin/env bash
# Importing DeepSeek-V3's released form: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised DeepSeek-V3-shaped Hugging Face directory at its real widths (hidden 7168,
# vocabulary 129280, MLA, one dense layer and one MoE layer with 16 of its 256 experts and the
# shared one; FP8 e4m3 weights in 128 x 128 blocks, bf16 embeddings; ~4.9 GB, written by
# bench/deepseek_fp8_checkpoint.py with torch from bench/bench_venv.sh), imported into an ep 2
# native checkpoint
# (fp32). The FP8 weights are dequantized tensor by tensor as they stream, so the peak should
# stay near twice the largest tensor (the fp32 embedding, 3.5 GiB).
#   bench/run_hf_fp8_import_bench.sh [--build-dir build] [--work DIR]
# Needs ~20 GB free under DIR (default /tmp/hf_fp8_bench); removes what it wrote.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work=/tmp/hf_fp8_bench
generator="$root/bench/deepseek_fp8_checkpoint.py"
config="$root/tests/fixtures/hf_configs/deepseek_v3.json"
largest="the fp32 embedding: 3535 MiB"
source "$root/bench/quantized_import_common.sh"
