#!/usr/bin/env python3
"""Writes tests/fixtures/hf/lora_peft: a LoRA run trained here (native checkpoint), its export
(the base model and the PEFT adapter), and the logits Hugging Face peft computes from the
export: PeftModel.from_pretrained(base, adapter), and the same after merge_and_unload().

Run by hand (needs torch, transformers, peft; the build and the tests do not):
    /tmp/hfvenv/bin/pip install torch==2.9.1 transformers safetensors peft
    mkdir -p /tmp/peftfix && cp tests/fixtures/hf/lora_peft/lora.yaml /tmp/peftfix/
    (cd /tmp/peftfix && /work/main/build/bin/pretrain --recipe lora.yaml)
    build/bin/convert_checkpoint --from /tmp/peftfix/lora --to-hf /tmp/peftfix/base \\
        --peft-adapter /tmp/peftfix/adapter
    /tmp/hfvenv/bin/python tools/gen_peft_fixtures.py /tmp/peftfix
"""
import json
import os
import shutil
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "hf", "lora_peft")
IDS = [[3, 17, 8, 29, 1, 0, 39, 12, 5, 22, 7, 31], [11, 2, 36, 4, 19, 25, 9, 14, 33, 6, 20, 1]]


def main():
    src = sys.argv[1]
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    for part in ("lora", "base", "adapter"):
        shutil.copytree(os.path.join(src, part), os.path.join(OUT, part))
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(os.path.join(src, "base"), dtype=torch.float32)
    base.eval()
    ids = torch.tensor(IDS)
    with torch.no_grad():
        base_logits = base(ids).logits
        model = PeftModel.from_pretrained(base, os.path.join(src, "adapter"))
        model.eval()
        lora_logits = model(ids).logits
        merged = model.merge_and_unload()
        merged_logits = merged(ids).logits
    expected = {
        "ids": IDS,
        "peft_logits": lora_logits.tolist(),
        "merged_logits": merged_logits.tolist(),
        "max_abs_lora_minus_base": float((lora_logits - base_logits).abs().max()),
        "versions": {"torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "peft": __import__("peft").__version__},
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(f"wrote {OUT}; |lora - base| max {expected['max_abs_lora_minus_base']:.4g}")


if __name__ == "__main__":
    main()
