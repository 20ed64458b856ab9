#!/usr/bin/env bash
# Importing gpt-oss-120b's released form: time and peak memory (RSS) of convert_checkpoint on a
# randomly initialised gpt-oss-120b-shaped Hugging Face directory at its real widths (hidden
# 2880, vocabulary 201088, one layer with 16 of its 128 experts; the experts' weights MXFP4
# `_blocks` / `_scales`, the rest bf16; ~2.7 GB, written by bench/gpt_oss_mxfp4_checkpoint.py
# with torch from bench/bench_venv.sh), imported into an ep 2 native checkpoint (fp32). Each
# expert's slab is read from the fused tensors and dequantized on its own, so the peak should
# stay near twice the largest tensor (the fp32 embedding or head, 2209 MiB), not the fused
# experts'.
#   bench/run_hf_mxfp4_import_bench.sh [--build-dir build] [--work DIR]
# Needs ~10 GB free under DIR (default /tmp/hf_mxfp4_bench); removes what it wrote.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work=/tmp/hf_mxfp4_bench
generator="$root/bench/gpt_oss_mxfp4_checkpoint.py"
config="$root/tests/fixtures/hf_configs/gpt_oss_120b.json"
largest="the fp32 embedding: 2209 MiB"
source "$root/bench/quantized_import_common.sh"
