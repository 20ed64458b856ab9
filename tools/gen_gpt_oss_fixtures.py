#!/usr/bin/env python3
"""Builds the GPT-OSS fixtures of the conversion tests with transformers itself (as
tools/gen_hf_fixtures.py does for the other families; same tokens and expected.json fields):

    tests/fixtures/hf/gpt_oss        GptOssForCausalLM, random, fp32, dense experts: 3 layers
                                     (sliding, full, sliding; a window of 5 keys), 4 experts of
                                     width 64 with biases, 2 per token, learned sinks, YaRN
    tests/fixtures/hf/gpt_oss_mxfp4  the same architecture as released: the experts' weights as
                                     MXFP4 `_blocks` / `_scales` (random FP4 values and block
                                     exponents), quantization_config quant_method mxfp4; its
                                     expected outputs are transformers' on the weights
                                     transformers' own dequantization
                                     (transformers.integrations.mxfp4.convert_moe_packed_tensors,
                                     what its GPT-OSS loader runs) makes of them

Run by hand from the repository root (the build and the tests do not run Python):

    /tmp/hf-venv/bin/python tools/gen_gpt_oss_fixtures.py

Made with transformers 5.24.0 and torch 2.15.0 on the CPU (recorded in expected.json).
"""
import json
import os
import shutil
import sys

import torch
import transformers as T
from safetensors.torch import load_file, save_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hf_fixtures import OUT, TOKENS, VOCAB, randomize  # noqa: E402


def config():
    return T.GptOssConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
                          num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                          sliding_window=5, max_position_embeddings=64,
                          layer_types=["sliding_attention", "full_attention",
                                       "sliding_attention"])


def record(cls, model_dir, out_dir):
    """transformers' outputs for the model in model_dir, written to out_dir/expected.json."""
    ref = cls.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokens = torch.tensor(TOKENS)
    with torch.no_grad():
        out = ref(input_ids=tokens, labels=tokens)
        kw = dict(input_ids=tokens[:1, :4], attention_mask=torch.ones(1, 4, dtype=torch.long),
                  max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        greedy = ref.generate(**kw)
        no_cache = ref.generate(use_cache=False, **kw)
    expected = {"tokens": TOKENS, "greedy_prompt": TOKENS[0][:4],
                "greedy": greedy[0, 4:].tolist(), "greedy_no_cache": no_cache[0, 4:].tolist(),
                "logits": out.logits.tolist(), "loss": out.loss.item(),
                "torch": torch.__version__, "transformers": T.__version__}
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(os.path.basename(out_dir), sorted(os.listdir(out_dir)), "loss", out.loss.item())


def dense():
    torch.manual_seed(41)
    model = T.GptOssForCausalLM(config()).eval()
    randomize(model, 4100)
    d = os.path.join(OUT, "gpt_oss")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    record(T.GptOssForCausalLM, d, d)


def mxfp4():
    torch.manual_seed(42)
    model = T.GptOssForCausalLM(config()).eval()
    randomize(model, 4200)
    d, plain = os.path.join(OUT, "gpt_oss_mxfp4"), os.path.join(OUT, "gpt_oss_mxfp4_plain.tmp")
    for x in (d, plain):
        shutil.rmtree(x, ignore_errors=True)
    model.save_pretrained(plain)
    tensors = load_file(os.path.join(plain, "model.safetensors"))
    g = torch.Generator().manual_seed(4201)
    stored, dense_weights = {}, {}
    for k, v in tensors.items():
        if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")):
            stored[k] = dense_weights[k] = v
            continue
        E, n_in, n_out = v.shape  # the parameter [E, in, out]; quantized as [E, out, in]
        blocks = torch.randint(0, 256, (E, n_out, n_in // 32, 16), generator=g, dtype=torch.uint8)
        # Exponents 2^-5 .. 2^-2: FP4 values up to 6 give weights up to 1.5.
        scales = torch.randint(122, 126, (E, n_out, n_in // 32), generator=g, dtype=torch.uint8)
        stored[k + "_blocks"], stored[k + "_scales"] = blocks, scales
        w = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        assert tuple(w.shape) == tuple(v.shape), (w.shape, v.shape)
        dense_weights[k] = w.contiguous()
    save_file(dense_weights, os.path.join(plain, "model.safetensors"), metadata={"format": "pt"})
    os.makedirs(d)
    save_file(stored, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(plain, "config.json")))
    cfg["quantization_config"] = {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                             "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"],
                                  "quant_method": "mxfp4"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    record(T.GptOssForCausalLM, plain, d)
    shutil.rmtree(plain)


if __name__ == "__main__":
    dense()
    mxfp4()
