"""Writes a randomly initialised DeepSeek-V3-shaped Hugging Face directory at its real widths for
bench/run_hf_fp8_import_bench.sh: one dense and one MoE layer (16 of the 256 experts plus the
shared one), FP8 e4m3 weights with [128, 128] weight_scale_inv blocks (as the release stores
them), bf16 embeddings, head and norms; sharded with an index.
    python deepseek_fp8_checkpoint.py OUT_DIR DEEPSEEK_V3_CONFIG_JSON
Uses torch only (the files are written by hf_bench_writer.py)."""
import json
import os
import sys

import torch

from hf_bench_writer import write_sharded

D, V, H, RQ, RKV, DN, DR, DV, F, FE, E = 7168, 129280, 128, 1536, 512, 128, 64, 128, 18432, 2048, 16


def main(out, config_path):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(0)

    def fp8(t, name, rows, cols):
        t[name] = ((torch.rand(rows, cols, generator=g) - 0.5) * 0.07).to(torch.float8_e4m3fn)
        t[name + "_scale_inv"] = torch.full(((rows + 127) // 128, (cols + 127) // 128), 1 / 64)

    def bf16(*shape):
        return ((torch.rand(*shape, generator=g) - 0.5) * 0.07).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    shards = [{"model.embed_tokens.weight": bf16(V, D), "lm_head.weight": bf16(V, D),
               "model.norm.weight": ones(D)}]
    for layer in range(2):
        t, p = {}, f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = t[p + "post_attention_layernorm.weight"] = ones(D)
        a = p + "self_attn."
        fp8(t, a + "q_a_proj.weight", RQ, D)
        t[a + "q_a_layernorm.weight"] = ones(RQ)
        fp8(t, a + "q_b_proj.weight", H * (DN + DR), RQ)
        fp8(t, a + "kv_a_proj_with_mqa.weight", RKV + DR, D)
        t[a + "kv_a_layernorm.weight"] = ones(RKV)
        fp8(t, a + "kv_b_proj.weight", H * (DN + DV), RKV)
        fp8(t, a + "o_proj.weight", D, H * DV)
        m = p + "mlp."
        mlps = [(m, F)] if layer == 0 else (
            [(m + f"experts.{x}.", FE) for x in range(E)] + [(m + "shared_experts.", FE)])
        for prefix, width in mlps:
            fp8(t, prefix + "gate_proj.weight", width, D)
            fp8(t, prefix + "up_proj.weight", width, D)
            fp8(t, prefix + "down_proj.weight", D, width)
        if layer == 1:
            t[m + "gate.weight"] = bf16(E, D)
            t[m + "gate.e_score_correction_bias"] = torch.zeros(E)
        shards.append(t)
    write_sharded(out, shards)
    config = json.load(open(config_path))
    config.update({"num_hidden_layers": 2, "first_k_dense_replace": 1, "n_routed_experts": E,
                   "num_nextn_predict_layers": 0})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
