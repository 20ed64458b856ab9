#!/usr/bin/env python3
"""Builds the Hugging Face fixtures of the conversion tests with transformers itself:

    tests/fixtures/hf/<name>/config.json, model.safetensors (or sharded with the index)
    tests/fixtures/hf/<name>/expected.json   {"tokens": [[..]], "logits": [[[..]]], "loss": x}

Each is a small randomly initialised model of one supported architecture; every parameter
(norm weights and biases included) is drawn at random so that a wrong mapping shows. logits
are transformers' forward in fp32 on the fixed tokens; loss is its causal-LM loss with
labels = tokens (mean over the shifted positions); greedy is transformers' generate (greedy,
12 new tokens) from the first 4 tokens of the first row. Run once from the repository root; the
outputs are committed and neither the build nor the tests run Python:

    python3 -m venv /tmp/hf-venv && /tmp/hf-venv/bin/pip install torch transformers safetensors
    /tmp/hf-venv/bin/python tools/gen_hf_fixtures.py

The fixtures were made with torch 2.9.1 and transformers 5.24.0 (recorded in expected.json).

`--deepseek-fp8` makes tests/fixtures/hf/deepseek_v3_fp8 (block-quantized FP8 weights with
DeepSeek-V3's formula; the expected outputs are transformers' on the dequantized weights).
`--only NAME` (re)makes one fixture of FIXTURES and leaves the others as they are
(tests/fixtures/hf/llama_bias, mistral_head_dim, llama_yarn, mistral_sliding, qwen3,
qwen3_tied_bf16, gpt_neox*, olmo2*, gemma2*, gemma3*, qwen2_moe, qwen3_moe, deepseek_v3* and
gemma3_multimodal were added that way). `--from-export HF_DIR NAME` instead records transformers' outputs for a model trained here and
exported by convert_checkpoint (tests/fixtures/hf/trained_*; the commands are in
tests/fixtures/hf/README.md).
"""
import json
import os
import shutil
import sys

import torch
import transformers as T

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")
VOCAB = 96  # not a multiple of 128: the import pads, the export cuts back


def llama_like(cls, **kw):
    base = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
                rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return cls(**base)


FIXTURES = {
    # name: (model class, config, dtype stored, max shard size or None)
    "gpt2": (T.GPT2LMHeadModel,
             T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=32,
                          bos_token_id=1, eos_token_id=2), torch.float32, None),
    "llama_bf16": (T.LlamaForCausalLM, llama_like(T.LlamaConfig), torch.bfloat16, None),
    "llama_tied": (T.LlamaForCausalLM, llama_like(T.LlamaConfig, tie_word_embeddings=True,
                                                  num_key_value_heads=4), torch.float16, None),
    "llama31_scaled": (T.LlamaForCausalLM,
                       llama_like(T.LlamaConfig, rope_theta=500000.0,
                                  rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 8192}),
                       torch.bfloat16, None),
    "mistral_sharded": (T.MistralForCausalLM, llama_like(T.MistralConfig, sliding_window=None),
                        torch.float32, "20KB"),
    "qwen2_tied": (T.Qwen2ForCausalLM, llama_like(T.Qwen2Config, tie_word_embeddings=True,
                                                  rope_theta=1000000.0), torch.bfloat16, None),
    "mixtral": (T.MixtralForCausalLM,
                llama_like(T.MixtralConfig, num_local_experts=4, num_experts_per_tok=2,
                           router_aux_loss_coef=0.01), torch.float32, None),
    "llama_bias": (T.LlamaForCausalLM,
                   llama_like(T.LlamaConfig, attention_bias=True, mlp_bias=True), torch.float32,
                   None),
    "llama_linear_rope": (T.LlamaForCausalLM,
                          llama_like(T.LlamaConfig,
                                     rope_scaling={"rope_type": "linear", "factor": 4.0}),
                          torch.float32, None),
    # head_dim 24 != hidden 64 / 4 heads (Mistral-NeMo-style; Megatron's kv_channels): the query
    # projection is 96 wide, not 64.
    "mistral_head_dim": (T.MistralForCausalLM,
                         llama_like(T.MistralConfig, hidden_size=64, head_dim=24,
                                    sliding_window=None),
                         torch.float32, None),
    # YaRN over head_dim 8 (4 rotary pairs): with 64 original positions the correction range is
    # pairs [0, 2), so pair 0 keeps its frequency, pair 1 blends, pairs 2-3 are interpolated; the
    # mscale pair gives the concentration (0.1 ln 4 + 1) / (0.05 ln 4 + 1).
    "llama_yarn": (T.LlamaForCausalLM,
                   llama_like(T.LlamaConfig,
                              rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 64,
                                            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                            "mscale_all_dim": 0.5}),
                   torch.float32, None),
    # Sliding-window attention over 5 keys on 16-token inputs (and a 4 + 12 token generation):
    # Megatron-Core's window_size [4, 0].
    "mistral_sliding": (T.MistralForCausalLM, llama_like(T.MistralConfig, sliding_window=5),
                        torch.float32, None),
    # Qwen3: per-head q_norm / k_norm before rope (Megatron-Core's qk_layernorm) and a head_dim
    # 16 apart from hidden 32 / 4 heads.
    "qwen3": (T.Qwen3ForCausalLM, llama_like(T.Qwen3Config, head_dim=16, rope_theta=1000000.0),
              torch.float32, None),
    "qwen3_tied_bf16": (T.Qwen3ForCausalLM,
                        llama_like(T.Qwen3Config, tie_word_embeddings=True, num_key_value_heads=4),
                        torch.bfloat16, None),
    # llama3 rope scaling with its own bounds (LLaMA-3.2 and others set theirs): over head_dim 8
    # the wavelengths 6.3 and 63 fall inside (32 / 6, 32 / 0.5) and blend, the others stretch.
    "llama3_rope_custom": (T.LlamaForCausalLM,
                           llama_like(T.LlamaConfig,
                                      rope_scaling={"rope_type": "llama3", "factor": 4.0,
                                                    "low_freq_factor": 0.5,
                                                    "high_freq_factor": 6.0,
                                                    "original_max_position_embeddings": 32}),
                           torch.float32, None),
    # Phi-3: fused qkv_proj [q|k|v] and gate_up_proj [gate|up]; LongRoPE over 8 original positions
    # (the 16-token forward uses the long factors, generation switches from short to long).
    "phi3_longrope": (T.Phi3ForCausalLM,
                      llama_like(T.Phi3Config, pad_token_id=0, max_position_embeddings=64,
                                 original_max_position_embeddings=8,
                                 rope_scaling={"type": "longrope",
                                               "short_factor": [1.0, 1.1, 1.3, 1.7],
                                               "long_factor": [1.5, 2.0, 3.0, 5.0]}),
                      torch.float32, None),
    "phi3_sliding_bf16": (T.Phi3ForCausalLM,
                          llama_like(T.Phi3Config, pad_token_id=0, sliding_window=5),
                          torch.bfloat16, None),
    # Dynamic NTK over 8 positions: the 16-token forward and the later decoding steps grow the
    # base with the sequence; the cached keys keep the rotation they were made with.
    "llama_dynamic_rope": (T.LlamaForCausalLM,
                           llama_like(T.LlamaConfig, max_position_embeddings=8,
                                      rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
                           torch.float32, None),
    # SmolLM3: NoPE layers. Every second layer without rope (no_rope_layer_interval 2, tied
    # embeddings), and an explicit list (1 = rope) on 4 layers in bf16.
    "smollm3": (T.SmolLM3ForCausalLM,
                llama_like(T.SmolLM3Config, num_hidden_layers=4, no_rope_layer_interval=2,
                           tie_word_embeddings=True, pad_token_id=0, rope_theta=2000000.0),
                torch.float32, None),
    "smollm3_list_bf16": (T.SmolLM3ForCausalLM,
                          llama_like(T.SmolLM3Config, num_hidden_layers=4,
                                     no_rope_layers=[0, 1, 1, 0], tie_word_embeddings=False,
                                     pad_token_id=0),
                          torch.bfloat16, None),
    # Phi-4-mini's kind of Phi-3: partial rotary embeddings (the first 6 of 8 head dims turn:
    # partial_rotary_factor 0.75) with LongRoPE factors over those 3 pairs.
    "phi3_partial_longrope": (T.Phi3ForCausalLM,
                              llama_like(T.Phi3Config, pad_token_id=0, max_position_embeddings=64,
                                         original_max_position_embeddings=8,
                                         partial_rotary_factor=0.75,
                                         rope_scaling={"type": "longrope",
                                                       "short_factor": [1.0, 1.2, 1.5],
                                                       "long_factor": [1.5, 2.5, 4.0]}),
                              torch.float32, None),
    # Per-layer sliding windows (model.window_attn_skip_freq): Qwen2's max_window_layers (layer 0
    # full, layers 1 and 2 a 5-key window) and SmolLM3's windows on its NoPE layers (1 and 3).
    "qwen2_window_layers": (T.Qwen2ForCausalLM,
                            llama_like(T.Qwen2Config, num_hidden_layers=3,
                                       use_sliding_window=True, sliding_window=5,
                                       max_window_layers=1),
                            torch.float32, None),
    "smollm3_sliding": (T.SmolLM3ForCausalLM,
                        llama_like(T.SmolLM3Config, num_hidden_layers=4, no_rope_layer_interval=2,
                                   use_sliding_window=True, sliding_window=5, pad_token_id=0),
                        torch.float32, None),
    # GPT-NeoX / Pythia: the parallel residual, a quarter of each 16-dim head turning (rotary_pct
    # 0.25), biases everywhere, an untied head; then the sequential residual with half the head
    # turning and the tanh GeLU, stored in bf16.
    "gpt_neox": (T.GPTNeoXForCausalLM,
                 T.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, vocab_size=VOCAB,
                                 max_position_embeddings=64, rotary_pct=0.25,
                                 rotary_emb_base=10000, layer_norm_eps=1e-5,
                                 use_parallel_residual=True, hidden_act="gelu", bos_token_id=1,
                                 eos_token_id=2, pad_token_id=0),
                 torch.float32, None),
    "gpt_neox_sequential_bf16": (T.GPTNeoXForCausalLM,
                                 T.GPTNeoXConfig(hidden_size=64, intermediate_size=128,
                                                 num_hidden_layers=3, num_attention_heads=4,
                                                 vocab_size=VOCAB, max_position_embeddings=64,
                                                 rotary_pct=0.5, rotary_emb_base=5000,
                                                 layer_norm_eps=1e-5,
                                                 use_parallel_residual=False,
                                                 hidden_act="gelu_new", bos_token_id=1,
                                                 eos_token_id=2, pad_token_id=0),
                                 torch.bfloat16, None),
    # OLMo-2: norms on the sub-layers' outputs, q/k norms over the whole projections (4 query
    # heads, 2 key/value heads); then head_dim 16 (a query width other than hidden), a tied
    # head and yarn-free linear rope scaling, stored in bf16.
    "olmo2": (T.Olmo2ForCausalLM, llama_like(T.Olmo2Config, pad_token_id=0), torch.float32, None),
    "olmo2_head_dim_bf16": (T.Olmo2ForCausalLM,
                            llama_like(T.Olmo2Config, head_dim=16, tie_word_embeddings=True,
                                       num_hidden_layers=3, pad_token_id=0,
                                       rope_scaling={"rope_type": "linear", "factor": 2.0}),
                            torch.bfloat16, None),
    # Gemma 2: 1 + w norms around both sub-layers, scaled embeddings, GeGLU, sliding and full
    # layers alternating (window 5 < the 16-token prompts), soft-capped scores and logits with
    # caps small enough to bite, query_pre_attn_scalar 24 (not head_dim 8), an untied head; then
    # tied, 3 layers, stored in bf16.
    "gemma2": (T.Gemma2ForCausalLM,
               llama_like(T.Gemma2Config, head_dim=8, sliding_window=5, query_pre_attn_scalar=24,
                          attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                          tie_word_embeddings=False, pad_token_id=0, rms_norm_eps=1e-6),
               torch.float32, None),
    "gemma2_tied_bf16": (T.Gemma2ForCausalLM,
                         llama_like(T.Gemma2Config, head_dim=8, num_hidden_layers=3,
                                    sliding_window=6, attn_logit_softcapping=1.5,
                                    final_logit_softcapping=4.0, pad_token_id=0,
                                    rms_norm_eps=1e-6),
                         torch.bfloat16, None),
    # Gemma 3 (text): per-head 1 + w q/k norms, layers 1-2 sliding and 3 full (layer_types), a
    # local rope base 10000 on the sliding layers and the global 1e6 with linear scaling 2 on
    # the full one, query_pre_attn_scalar 256 (default), tied; then 6 layers by its 5:1 pattern
    # with query_pre_attn_scalar = head_dim, untied, in bf16.
    "gemma3": (T.Gemma3ForCausalLM,
               llama_like(T.Gemma3TextConfig, head_dim=8, num_hidden_layers=3, sliding_window=5,
                          layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                              "rope_theta": 1000000.0},
                                           "sliding_attention": {"rope_type": "default",
                                                                 "rope_theta": 10000.0}},
                          pad_token_id=0, rms_norm_eps=1e-6),
               torch.float32, None),
    "gemma3_pattern_bf16": (T.Gemma3ForCausalLM,
                            llama_like(T.Gemma3TextConfig, head_dim=16, num_hidden_layers=6,
                                       sliding_window=4, query_pre_attn_scalar=16,
                                       tie_word_embeddings=False, pad_token_id=0,
                                       rms_norm_eps=1e-6),
                            torch.bfloat16, None),
    # Qwen2-MoE (Qwen1.5-MoE): 4 experts, top-2 of the softmax over all of them (norm_topk_prob
    # false), a shared expert 40 wide scaled by its sigmoid gate, q/k/v biases; layer 1 dense
    # (mlp_only_layers) between two routed ones.
    "qwen2_moe": (T.Qwen2MoeForCausalLM,
                  llama_like(T.Qwen2MoeConfig, num_hidden_layers=3, num_experts=4,
                             num_experts_per_tok=2, moe_intermediate_size=24,
                             shared_expert_intermediate_size=40, mlp_only_layers=[1],
                             rms_norm_eps=1e-6),
                  torch.float32, None),
    # Qwen3-MoE: 8 experts, top-2 renormalized (norm_topk_prob), per-head q/k norms with head_dim
    # 16; every second layer routed (decoder_sparse_step 2: layers 1 and 3), the others dense.
    "qwen3_moe": (T.Qwen3MoeForCausalLM,
                  llama_like(T.Qwen3MoeConfig, num_hidden_layers=4, head_dim=16, num_experts=8,
                             num_experts_per_tok=2, moe_intermediate_size=16,
                             norm_topk_prob=True, decoder_sparse_step=2, rms_norm_eps=1e-6),
                  torch.float32, None),
    # DeepSeek-V3: multi-latent attention (q_lora_rank 12, kv_lora_rank 8, qk 8 + rope 4 per
    # head, values 6, rope dims interleaved in pairs), layer 0 dense, layers 1-2 routed: sigmoid
    # scores with a random e_score_correction_bias, top-4 of 8 experts within the best 2 of 4
    # groups, renormalized and scaled by 2.5, one shared expert.
    "deepseek_v3": (T.DeepseekV3ForCausalLM,
                    llama_like(T.DeepseekV3Config, num_hidden_layers=3, num_key_value_heads=4,
                               q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=8,
                               qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8,
                               num_experts_per_tok=4, n_group=4, topk_group=2,
                               n_shared_experts=1, routed_scaling_factor=2.5,
                               moe_intermediate_size=16, first_k_dense_replace=1,
                               norm_topk_prob=True, rms_norm_eps=1e-6),
                    torch.float32, None),
    # The plain query projection (q_lora_rank null), rope dims in halves (rope_interleave
    # false), YaRN over 16 original positions with factor 4 and mscale_all_dim (the softmax
    # scale times mscale^2), no groups, two shared experts, in bf16.
    "deepseek_v3_yarn_bf16": (T.DeepseekV3ForCausalLM,
                              llama_like(T.DeepseekV3Config, num_hidden_layers=2,
                                         num_key_value_heads=4, q_lora_rank=None,
                                         kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4,
                                         v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
                                         n_group=1, topk_group=1, n_shared_experts=2,
                                         routed_scaling_factor=1.5, moe_intermediate_size=16,
                                         first_k_dense_replace=1, norm_topk_prob=True,
                                         rope_interleave=False, rms_norm_eps=1e-6,
                                         rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 16,
                                                       "beta_fast": 32.0, "beta_slow": 1.0,
                                                       "mscale": 1.0, "mscale_all_dim": 1.0}),
                              torch.bfloat16, None),
    # Gemma 3 multimodal (Gemma3ForConditionalGeneration: a SigLIP vision tower, the projector
    # and the language model under language_model.); text-only inputs, so its outputs are the
    # language model's. The import takes the text model and leaves the vision parts out.
    "gemma3_multimodal": (T.Gemma3ForConditionalGeneration,
                          T.Gemma3Config(
                              text_config=llama_like(T.Gemma3TextConfig, head_dim=8,
                                                     num_hidden_layers=3, sliding_window=5,
                                                     pad_token_id=0, rms_norm_eps=1e-6),
                              vision_config=T.SiglipVisionConfig(
                                  hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, image_size=28, patch_size=14),
                              mm_tokens_per_image=4, boi_token_index=93, eoi_token_index=94,
                              image_token_index=95),
                          torch.float32, None),
}

BERT = {
    # name: (model class, dtype stored)
    "bert_pretraining": (T.BertForPreTraining, torch.float32),
    "bert_mlm_bf16": (T.BertForMaskedLM, torch.bfloat16),
}
BERT_TYPES = [[0] * 8 + [1] * 8, [0] * 6 + [1] * 10]
BERT_MASK = [[1] * 16, [1] * 12 + [0] * 4]  # the second sample is padded

TOKENS = [[1, 17, 42, 5, 88, 23, 64, 9, 31, 77, 3, 50, 12, 95, 40, 6],
          [1, 90, 2, 33, 33, 71, 8, 59, 26, 44, 13, 81, 67, 0, 19, 55]]


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.2
            if "norm" in name or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name.endswith("ln_f.weight"):
                p.copy_(1.0 + noise if name.endswith("weight") else noise)
            elif "LayerNorm" in name:
                p.copy_(1.0 + noise if name.endswith("weight") else noise)
            else:
                p.copy_(noise)
        for name, b in model.named_buffers():  # DeepSeek-V3's expert bias steers the routing
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.2)


def main(only=None):
    os.makedirs(OUT, exist_ok=True)
    for i, (name, (cls, config, dtype, shard)) in enumerate(FIXTURES.items()):
        if only is not None and name != only:
            continue
        torch.manual_seed(i)
        model = cls(config).eval()
        randomize(model, 1000 + i)
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        kw = {"max_shard_size": shard} if shard else {}
        model.to(dtype).save_pretrained(d, **kw)
        gen = os.path.join(d, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)
        # The reference is transformers' forward of the saved directory, loaded in fp32 (buffers
        # such as rotary frequencies are rebuilt in fp32, as a user loading it gets them).
        ref = cls.from_pretrained(d, dtype=torch.float32).eval()
        tokens = torch.tensor(TOKENS)
        with torch.no_grad():
            out = ref(input_ids=tokens, labels=tokens)
            greedy = ref.generate(input_ids=tokens[:1, :4], attention_mask=torch.ones(1, 4,
                                  dtype=torch.long), max_new_tokens=12, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
            # Without the cache: the same tokens unless the rope follows the sequence length
            # (dynamic), whose cached keys keep their older rotations.
            no_cache = ref.generate(input_ids=tokens[:1, :4], attention_mask=torch.ones(
                1, 4, dtype=torch.long), max_new_tokens=12, do_sample=False, eos_token_id=None,
                pad_token_id=0, use_cache=False)
        expected = {"tokens": TOKENS,
                    "greedy_prompt": TOKENS[0][:4],
                    "greedy": greedy[0, 4:].tolist(),
                    "greedy_no_cache": no_cache[0, 4:].tolist(),
                    "logits": out.logits.tolist(),
                    "loss": out.loss.item(),
                    "torch": torch.__version__, "transformers": T.__version__}
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, sorted(os.listdir(d)), "loss", out.loss.item())


def bert_fixtures():
    for i, (name, (cls, dtype)) in enumerate(BERT.items()):
        torch.manual_seed(100 + i)
        config = T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=32,
                              hidden_act="gelu", layer_norm_eps=1e-12)
        model = cls(config).eval()
        randomize(model, 2000 + i)
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        model.to(dtype).save_pretrained(d)
        ref = cls.from_pretrained(d, dtype=torch.float32).eval()
        kw = dict(input_ids=torch.tensor(TOKENS), token_type_ids=torch.tensor(BERT_TYPES),
                  attention_mask=torch.tensor(BERT_MASK))
        with torch.no_grad():
            out = ref(**kw)
        logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
        expected = {"tokens": TOKENS, "token_types": BERT_TYPES, "attention_mask": BERT_MASK,
                    "logits": logits.tolist(),
                    "torch": torch.__version__, "transformers": T.__version__}
        if hasattr(out, "seq_relationship_logits"):
            expected["nsp_logits"] = out.seq_relationship_logits.tolist()
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, sorted(os.listdir(d)))


def llama_with_tokenizer():
    """A LLaMA whose directory carries the LLaMA-3-style tokenizer of the tokenizer fixtures
    (run tools/gen_hf_tokenizer_fixtures.py first): greedy generation from a text prompt."""
    from tokenizers import Tokenizer
    tok_dir = os.path.join(OUT, "..", "hf_tokenizers", "llama3_style")
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    torch.manual_seed(50)
    config = llama_like(T.LlamaConfig, vocab_size=tok.get_vocab_size(), bos_token_id=0,
                        eos_token_id=1)
    model = T.LlamaForCausalLM(config).eval()
    randomize(model, 3000)
    d = os.path.join(OUT, "llama_with_tokenizer")
    shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(d)
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)
    ref = T.LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    prompt = "It is a truth universally acknowledged"
    ids = tok.encode(prompt).ids  # with the BOS of the template
    out = ref.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                       dtype=torch.long), max_new_tokens=10, do_sample=False,
                       eos_token_id=None, pad_token_id=0)
    new = out[0, len(ids):].tolist()
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"prompt": prompt, "prompt_ids": ids, "greedy": new,
                   "text": tok.decode(new, skip_special_tokens=False),
                   "torch": torch.__version__, "transformers": T.__version__}, f)
    print("llama_with_tokenizer", sorted(os.listdir(d)), new)


TOKENIZER_TEXTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune,"
    " must be in want of a wife.",
    "In the beginning God created the heaven and the earth.\n\nAnd the earth was without form.",
    " leading space", "two  spaces and\ttabs", "caf\u00e9 na\u00efve \u2603 \u4e2d\u6587 \U0001F600",
    "Mr. Knightley's \"quotes\" -- 1234567", ""]


def from_export(src, name):
    """A model trained here and exported by convert_checkpoint --to-hf: copied in as
    tests/fixtures/hf/<name> with transformers' logits and loss on the fixed tokens (whatever
    model class config.json names), so the test shows that transformers reads our export as we
    compute it."""
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    arch = json.load(open(os.path.join(d, "config.json")))["architectures"][0]
    cls = getattr(T, arch)
    ref = cls.from_pretrained(d, dtype=torch.float32).eval()
    tokens = torch.tensor(TOKENS)
    with torch.no_grad():
        out = ref(input_ids=tokens, labels=tokens)
    greedy = ref.generate(input_ids=tokens[:1, :4], attention_mask=torch.ones(1, 4,
                          dtype=torch.long), max_new_tokens=12, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    expected = {"tokens": TOKENS, "logits": out.logits[:, :, :512].tolist(),
                "logits_columns": 512, "loss": out.loss.item(),
                "greedy_prompt": TOKENS[0][:4], "greedy": greedy[0, 4:].tolist(),
                "torch": torch.__version__, "transformers": T.__version__}
    if os.path.exists(os.path.join(d, "tokenizer_config.json")):
        # The exported tokenizer as AutoTokenizer loads it: its ids for some texts.
        tok = T.AutoTokenizer.from_pretrained(d)
        expected["tokenizer_class"] = type(tok).__name__
        expected["tokenizer_texts"] = TOKENIZER_TEXTS
        expected["tokenizer_ids"] = [tok.encode(t, add_special_tokens=False)
                                     for t in TOKENIZER_TEXTS]
    with open(os.path.join(d, "expected.json"), "w") as f:
        # The first 512 vocabulary columns keep the file small; the loss covers all of them.
        json.dump(expected, f)
    print(name, arch, sorted(os.listdir(d)), "loss", out.loss.item())


FP8_BLOCK = [16, 16]  # DeepSeek-V3 uses [128, 128]; smaller blocks tile these small weights


def fp8_quantize(w, block):
    """DeepSeek-V3's block quantization: per [br, bc] block scale = amax / 448 (e4m3's largest
    value), q = (w / scale) in float8_e4m3fn; returns q and the [ceil(r/br), ceil(c/bc)] scales
    (weight_scale_inv: w ~ q * scale)."""
    rows, cols = w.shape
    br, bc = block
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    scale = torch.empty((rows + br - 1) // br, (cols + bc - 1) // bc, dtype=torch.float32)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc].float()
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


def deepseek_fp8(name="deepseek_v3_fp8"):
    """DeepSeek-V3 as it is released: every linear weight of the layers (attention, dense MLP,
    experts, shared experts; not the embeddings, norms, router or head) in F8_E4M3 with
    weight_scale_inv blocks, quantization_config in config.json. expected.json holds
    transformers' outputs for the dequantized weights (q * scale in fp32), the model the import
    must build."""
    from safetensors.torch import load_file, save_file
    _, config, _, _ = FIXTURES["deepseek_v3"]
    torch.manual_seed(77)
    model = T.DeepseekV3ForCausalLM(config).eval()
    randomize(model, 7700)
    d, plain = os.path.join(OUT, name), os.path.join(OUT, name + "_dequantized.tmp")
    for x in (d, plain):
        shutil.rmtree(x, ignore_errors=True)
    model.save_pretrained(plain)
    tensors = load_file(os.path.join(plain, "model.safetensors"))
    stored, dequantized = {}, {}
    for k, v in tensors.items():
        linear = ".layers." in k and k.endswith("proj.weight") or k.endswith("proj_with_mqa.weight")
        if not linear:
            stored[k] = dequantized[k] = v
            continue
        q, scale = fp8_quantize(v, FP8_BLOCK)
        stored[k], stored[k + "_scale_inv"] = q, scale
        dequantized[k] = (q.float() * scale.repeat_interleave(FP8_BLOCK[0], 0)[:v.shape[0]]
                          .repeat_interleave(FP8_BLOCK[1], 1)[:, :v.shape[1]]).to(v.dtype)
    save_file(dequantized, os.path.join(plain, "model.safetensors"), metadata={"format": "pt"})
    os.makedirs(d)
    save_file(stored, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(plain, "config.json")))
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                  "quant_method": "fp8", "weight_block_size": FP8_BLOCK}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    ref = T.DeepseekV3ForCausalLM.from_pretrained(plain, dtype=torch.float32).eval()
    tokens = torch.tensor(TOKENS)
    with torch.no_grad():
        out = ref(input_ids=tokens, labels=tokens)
        greedy = ref.generate(input_ids=tokens[:1, :4], attention_mask=torch.ones(
            1, 4, dtype=torch.long), max_new_tokens=12, do_sample=False, eos_token_id=None,
            pad_token_id=0)
    expected = {"tokens": TOKENS, "greedy_prompt": TOKENS[0][:4],
                "greedy": greedy[0, 4:].tolist(), "logits": out.logits.tolist(),
                "loss": out.loss.item(), "torch": torch.__version__,
                "transformers": T.__version__}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f)
    shutil.rmtree(plain)
    print(name, sorted(os.listdir(d)), "loss", out.loss.item())


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--deepseek-fp8":
        deepseek_fp8()
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "--from-export":
        from_export(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "--only":  # one fixture of FIXTURES, the rest kept
        main(sys.argv[2])
        sys.exit(0)
    main()
    bert_fixtures()
    llama_with_tokenizer()
