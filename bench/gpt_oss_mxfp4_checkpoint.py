"""Writes a randomly initialised gpt-oss-120b-shaped Hugging Face directory at its real widths
for bench/run_hf_mxfp4_import_bench.sh: one layer (a sliding one) with 16 of the 128 experts, as
the release stores them: the experts' gate_up_proj / down_proj as MXFP4 `_blocks` (uint8, two
FP4 values a byte) and `_scales` (uint8 exponents), everything else bf16 (attention with its
biases and sinks, router, norms, embeddings and head at vocabulary 201088); sharded with an
index.
    python gpt_oss_mxfp4_checkpoint.py OUT_DIR GPT_OSS_120B_CONFIG_JSON
Uses torch only (the files are written by hf_bench_writer.py)."""
import json
import os
import sys

import torch

from hf_bench_writer import write_sharded

D, V, H, G, DH, F, E = 2880, 201088, 64, 8, 64, 2880, 16


def bf16(*shape, scale=0.02):
    return (torch.randn(*shape) * scale).to(torch.bfloat16)


def main(out, config_path):
    os.makedirs(out)
    g = torch.Generator().manual_seed(5)
    p = "model.layers.0."
    shards = [
        {"model.embed_tokens.weight": bf16(V, D)},
        {"lm_head.weight": bf16(V, D), "model.norm.weight": bf16(D, scale=1.0)},
        {p + "input_layernorm.weight": bf16(D, scale=1.0),
         p + "post_attention_layernorm.weight": bf16(D, scale=1.0),
         p + "self_attn.q_proj.weight": bf16(H * DH, D), p + "self_attn.q_proj.bias": bf16(H * DH),
         p + "self_attn.k_proj.weight": bf16(G * DH, D), p + "self_attn.k_proj.bias": bf16(G * DH),
         p + "self_attn.v_proj.weight": bf16(G * DH, D), p + "self_attn.v_proj.bias": bf16(G * DH),
         p + "self_attn.o_proj.weight": bf16(D, H * DH), p + "self_attn.o_proj.bias": bf16(D),
         p + "self_attn.sinks": bf16(H, scale=1.0),
         p + "mlp.router.weight": bf16(E, D), p + "mlp.router.bias": bf16(E),
         p + "mlp.experts.gate_up_proj_bias": bf16(E, 2 * F),
         p + "mlp.experts.down_proj_bias": bf16(E, D)},
    ]
    experts = {}
    for name, rows, cols in (("gate_up_proj", 2 * F, D), ("down_proj", D, F)):
        x = p + "mlp.experts." + name
        experts[x + "_blocks"] = torch.randint(0, 256, (E, rows, cols // 32, 16), generator=g,
                                               dtype=torch.uint8)
        experts[x + "_scales"] = torch.randint(118, 122, (E, rows, cols // 32), generator=g,
                                               dtype=torch.uint8)
    shards.append(experts)
    write_sharded(out, shards)
    config = json.load(open(config_path))
    config.update(num_hidden_layers=1, num_local_experts=E, layer_types=["sliding_attention"])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
