#pragma once
// The planner's view of the model (internal to megatron/planning): the sizes the trainer's model
// has (from models/registry.h's TransformerSpec mapping, the recipe's BERT head and LoRA
// adapters) and its parameter counts per tensor-parallel rank, by piece.
#include <cstdint>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/transformer/transformer_spec.h"

namespace megatron::planning::detail {

// Sizes derived from the model config.
struct Dims {
  int64_t L, D, H, G, Dh, F, fc1, S, P, E, topk;
  int64_t moe_ffn, moe_fc1, shared_ffn, shared_fc1;  // MoE layers' experts and shared expert
  bool shared_gate = false;                          // the shared expert's gate [1, D]
  std::vector<bool> moe_layer;                       // per layer (MoE models)
  double imbalance = 1;  // tokens of the busiest expert-parallel rank / mean (see moe_imbalance)
  bool layernorm, swiglu, bias, qkv_bias, qk_norm, rope, tied, bert, binary_head;
  bool qk_norm_projection = false;  // q/k norm weights [H x Dh] and [G x Dh], split over tp
  bool attention_sinks = false;     // learned sink logits [H], split over tp
  int64_t block_norms = 2;          // per layer: input norms and/or sub-layer output norms
  TransformerSpec::Mla mla;         // multi-latent attention (kv_lora_rank > 0)
  double hidden_dropout, attention_dropout;
  // peft: lora (rank 0: none): adapters on these projections; everything else frozen.
  int64_t lora_rank = 0;
  bool lora_qkv = false, lora_proj = false, lora_fc1 = false, lora_fc2 = false;
  int64_t norm() const { return layernorm ? 2 * D : D; }
  bool is_moe(int64_t layer) const { return E > 0 && moe_layer[static_cast<size_t>(layer)]; }
  int64_t moe_layers(int64_t first, int64_t count) const {
    int64_t n = 0;
    for (int64_t l = first; l < first + count; ++l) n += is_moe(l) ? 1 : 0;
    return n;
  }
};

// Dropless routing sizes expert activations and all-to-alls for the busiest rank at this
// multiple of the mean (a planning assumption; the trainer logs the real imbalance); with a
// capacity factor, for the capacity.
constexpr double kDroplessImbalance = 1.5;

// The whole recipe's model: the model section, BERT's head and the LoRA adapters.
Dims dims_of(const config::Recipe& r);
// The model the trainer builds (models/registry.h), in the planner's terms.
Dims dims_of(const config::ModelConfig& m, bool bert_binary_head = true);

// A routed expert's weights on one tensor-parallel rank (no biases).
int64_t expert_params(const Dims& d, int64_t tp);
// One layer's LoRA adapters per tp rank (megatron/transformer/lora.h).
int64_t lora_layer_params(const Dims& d, int64_t tp);
// One layer per tp rank: attention, the dense MLP or (moe) the router, this rank's experts and
// the shared expert, and the LoRA adapters.
int64_t layer_params(const Dims& d, int64_t tp, int64_t ep, int64_t etp, bool moe);
// Word (+ position, token type) embeddings, and BERT's embedding norm (post-LN), per tp rank.
int64_t embedding_params(const Dims& d, int64_t V, int64_t tp);
// What the last stage adds (not counting a tied copy of the word embeddings), per tp rank.
int64_t head_params(const Dims& d, int64_t V, int64_t tp);

}  // namespace megatron::planning::detail
