#include "megatron/planning/model_dims.h"

#include "models/registry.h"

namespace megatron::planning::detail {

namespace {

// The planner's sizes of the model the trainer builds from spec `t` (models/registry.h) of
// model section `m`.
Dims dims_of_spec(const TransformerSpec& t, const config::ModelConfig& m, bool bert_binary_head) {
  Dims d{};
  d.binary_head = bert_binary_head;
  d.L = t.num_layers;
  d.D = t.hidden;
  d.H = t.heads;
  d.G = t.query_groups;
  d.Dh = t.head_dim();
  d.F = t.ffn;
  d.swiglu = t.swiglu;
  d.fc1 = d.swiglu ? 2 * d.F : d.F;
  d.S = t.seq_length;
  d.P = m.max_positions();
  d.E = m.moe.num_experts;
  d.topk = m.moe.moe_router_topk;
  d.moe_ffn = m.moe.expert_ffn(d.F);
  d.moe_fc1 = d.swiglu ? 2 * d.moe_ffn : d.moe_ffn;
  d.shared_ffn = m.moe.moe_shared_expert_intermediate_size;
  d.shared_fc1 = d.swiglu ? 2 * d.shared_ffn : d.shared_ffn;
  d.shared_gate = m.moe.moe_shared_expert_gate;
  for (int64_t l = 0; l < d.L; ++l) d.moe_layer.push_back(m.moe.moe_layer_freq.is_moe(l));
  d.imbalance = m.moe.moe_expert_capacity_factor.value_or(kDroplessImbalance);
  d.bert = m.arch == config::Arch::BERT;  // post-LN blocks, a decoder tied to the embeddings
  d.layernorm = t.norm == Norm::Kind::LayerNorm;
  d.bias = t.bias;
  d.qkv_bias = t.bias || t.qkv_bias;
  d.qk_norm = t.qk_norm;
  d.qk_norm_projection = t.qk_norm && t.qk_norm_whole_projection;
  d.attention_sinks = t.attention_sinks == TransformerSpec::Sinks::Learned;
  d.mla = t.mla;
  d.block_norms = (t.input_norms ? 2 : 0) + (t.output_norms ? 2 : 0);
  d.rope = t.rope;
  d.tied = d.bert || m.tie_embeddings;
  d.hidden_dropout = t.hidden_dropout;
  d.attention_dropout = t.attention_dropout;
  return d;
}

}  // namespace

// The whole recipe's model: the model section, BERT's head and the LoRA adapters, as the
// registry maps them.
Dims dims_of(const config::Recipe& r) {
  const TransformerSpec t = models::transformer_spec_from_recipe(r, 1);
  Dims d = dims_of_spec(t, r.model, r.data.bert_binary_head);
  d.lora_rank = t.lora.rank;
  d.lora_qkv = t.lora_qkv;
  d.lora_proj = t.lora_proj;
  d.lora_fc1 = t.lora_fc1;
  d.lora_fc2 = t.lora_fc2;
  return d;
}

Dims dims_of(const config::ModelConfig& m, bool bert_binary_head) {
  return dims_of_spec(models::transformer_spec_from_model(m), m, bert_binary_head);
}

// A routed expert's weights on one tensor-parallel rank (with model.add_bias its fc1 bias, split
// like the rows, and its fc2 bias, whole).
int64_t expert_params(const Dims& d, int64_t tp) {
  return (d.moe_fc1 + d.moe_ffn) * d.D / tp + (d.bias ? d.moe_fc1 / tp + d.D : 0);
}

// One layer's LoRA adapters per tp rank (megatron/transformer/lora.h): a column-parallel base
// has A [r, in] whole and B [out / tp, r]; a row-parallel one A [r, in / tp] and B [out, r] whole.
int64_t lora_layer_params(const Dims& d, int64_t tp) {
  const int64_t r = d.lora_rank, qkv = (d.H + 2 * d.G) * d.Dh;
  if (r == 0) return 0;
  int64_t n = 0;
  if (d.lora_qkv) n += r * d.D + qkv / tp * r;
  if (d.lora_proj) n += r * d.H * d.Dh / tp + d.D * r;
  if (d.lora_fc1) n += r * d.D + d.fc1 / tp * r;
  if (d.lora_fc2) n += r * d.F / tp + d.D * r;
  return n;
}

// Multi-latent attention's weights per tp rank: the replicated down projections and their norms,
// the head-split up projections and the output projection.
int64_t mla_params(const Dims& d, int64_t tp) {
  const auto& m = d.mla;
  const int64_t Dqk = m.qk_nope + m.qk_rope;
  int64_t n = m.q_lora_rank > 0 ? m.q_lora_rank * (d.D + 1) + d.H * Dqk * m.q_lora_rank / tp
                                : d.H * Dqk * d.D / tp;
  n += (m.kv_lora_rank + m.qk_rope) * d.D + m.kv_lora_rank;
  n += d.H * (m.qk_nope + m.v) * m.kv_lora_rank / tp;
  return n + d.H * m.v * d.D / tp;
}

int64_t layer_params(const Dims& d, int64_t tp, int64_t ep, int64_t etp, bool moe) {
  const int64_t qkv = (d.H + 2 * d.G) * d.Dh;
  const int64_t qk_norms = !d.qk_norm             ? 0
                           : d.qk_norm_projection ? (d.H + d.G) * d.Dh / tp
                                                  : 2 * d.Dh;
  int64_t n = d.block_norms * d.norm() + qk_norms + (d.attention_sinks ? d.H / tp : 0);
  if (d.mla.enabled()) {
    n += mla_params(d, tp);
  } else {
    n += qkv * d.D / tp + (d.qkv_bias ? qkv / tp : 0);
    n += d.H * d.Dh * d.D / tp + (d.bias ? d.D : 0);
  }
  auto dense_mlp = [&](int64_t fc1, int64_t F) {
    return fc1 * d.D / tp + (d.bias ? fc1 / tp : 0) + F * d.D / tp + (d.bias ? d.D : 0);
  };
  if (!moe) return n + dense_mlp(d.fc1, d.F) + lora_layer_params(d, tp);
  // The router (and its bias), this rank's experts, the shared expert.
  n += d.E * d.D + (d.bias ? d.E : 0) + (d.E / ep) * expert_params(d, etp);
  if (d.shared_ffn > 0) n += dense_mlp(d.shared_fc1, d.shared_ffn);
  if (d.shared_gate) n += d.D;
  return n;
}

// Word (+ position, token type) embeddings, and BERT's embedding norm (post-LN), per tp rank.
int64_t embedding_params(const Dims& d, int64_t V, int64_t tp) {
  int64_t n = V * d.D / tp;
  if (!d.rope) n += d.P * d.D;
  if (d.bert) n += 2 * d.D + d.norm();
  return n;
}

// What the last stage adds (not counting a tied copy of the word embeddings), per tp rank.
int64_t head_params(const Dims& d, int64_t V, int64_t tp) {
  int64_t n = d.tied ? 0 : V * d.D / tp;
  if (d.bert)  // LM-head dense + norm + vocab-parallel output bias, pooler, binary head
    n += d.D * d.D + d.D + d.norm() + V / tp + (d.binary_head ? d.D * d.D + d.D + 2 * d.D + 2 : 0);
  else
    n += d.norm();  // final norm
  return n;
}

}  // namespace megatron::planning::detail
