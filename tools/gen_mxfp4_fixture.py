#!/usr/bin/env python3
"""Writes tests/fixtures/mxfp4: GPT-OSS-style MXFP4 tensors and what transformers' own
dequantization (transformers.integrations.mxfp4.convert_moe_packed_tensors, the function its
GPT-OSS loader runs) makes of them, in fp32:

    blocks.bin     uint8 [2, 3, 4, 16]   (experts, rows, groups, 16 bytes: 32 FP4 values a group)
    scales.bin     uint8 [2, 3, 4]       exponents + 127, from 2^-10 to 2^10 and the extremes
                                         2^-127 and 2^127 (6 * 2^127 overflows to inf)
    expected.bin   float32 [2, 128, 3]   transformers' result (its [E, in, out] layout: the
                                         dequantized [E, rows, groups * 32] transposed)

Run by hand from the repository root (torch and transformers needed; the build and the tests do
not run Python):

    /tmp/hf-venv/bin/python tools/gen_mxfp4_fixture.py

Made with transformers 5.24.0, torch 2.15.0+cu132 (on the CPU).
"""
import os

import torch
import transformers
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "mxfp4")


def main():
    g = torch.Generator().manual_seed(7)
    blocks = torch.randint(0, 256, (2, 3, 4, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(117, 138, (2, 3, 4), generator=g, dtype=torch.uint8)
    scales[0, 0, 0] = 0    # 2^-127
    scales[1, 2, 3] = 254  # 2^127
    expected = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    assert tuple(expected.shape) == (2, 128, 3), expected.shape
    os.makedirs(OUT, exist_ok=True)
    blocks.numpy().tofile(os.path.join(OUT, "blocks.bin"))
    scales.numpy().tofile(os.path.join(OUT, "scales.bin"))
    expected.contiguous().numpy().astype("<f4").tofile(os.path.join(OUT, "expected.bin"))
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
