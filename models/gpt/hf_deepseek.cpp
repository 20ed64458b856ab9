#include "models/gpt/hf_deepseek.h"

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_rope.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;
using hf::TensorMapping;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

std::set<std::string> deepseek_keys() {
  std::set<std::string> k = decoder_keys();
  k.insert({"q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "qk_head_dim",
            "rope_interleave",
            "n_routed_experts",
            "n_shared_experts",
            "routed_scaling_factor",
            "n_group",
            "topk_group",
            "num_experts_per_tok",
            "first_k_dense_replace",
            "norm_topk_prob",
            "moe_intermediate_size",
            "attention_bias",
            "attention_dropout",
            "num_nextn_predict_layers",
            "pretraining_tp",
            "output_router_logits",
            "aux_loss_alpha",
            "seq_aux",
            "topk_method",
            "scoring_func",
            "ep_size",
            "moe_layer_freq",
            "auto_map",
            "quantization_config"});
  return k;
}

// The attention: MLA's ranks and head dimensions; heads have their own keys and values.
void read_mla(const hf::ConfigJson& c, config::ModelConfig& m) {
  config::MlaConfig& a = m.mla;
  a.multi_latent_attention = true;
  a.q_lora_rank = c.has("q_lora_rank") ? c.integer("q_lora_rank") : 0;
  a.kv_lora_rank = c.integer("kv_lora_rank");
  a.qk_head_dim = c.integer("qk_nope_head_dim");
  a.qk_pos_emb_head_dim = c.integer("qk_rope_head_dim");
  a.v_head_dim = c.integer("v_head_dim");
  if (c.has("qk_head_dim") && c.integer("qk_head_dim") != a.qk_dims())
    c.fail("qk_head_dim", concat(c.integer("qk_head_dim"), " is not qk_nope_head_dim + ",
                                 "qk_rope_head_dim (", a.qk_dims(), ")"));
  // (transformers 5 writes head_dim = qk_rope_head_dim, the rope's width)
  if (c.has("head_dim") && c.integer("head_dim") != a.qk_pos_emb_head_dim)
    c.fail("head_dim",
           concat(c.integer("head_dim"), " is not qk_rope_head_dim (", a.qk_pos_emb_head_dim, ")"));
  m.kv_channels = 0;
  if (m.num_query_groups != m.num_attention_heads)
    c.fail("num_key_value_heads",
           concat(m.num_query_groups, " differs from num_attention_heads ", m.num_attention_heads,
                  " (multi-latent attention gives every head its keys and values)"));
  m.num_query_groups = 0;
  if (c.boolean_or("attention_bias", false))
    c.fail("attention_bias", "true is not implemented for multi-latent attention");
  if (c.integer_or("pretraining_tp", 1) != 1) c.fail("pretraining_tp", "must be 1");
}

// YaRN with mscale_all_dim scales the softmax by mscale^2, as multi-latent attention does here
// by itself (models/registry.cpp): nothing to set, but both mscales are needed.
void check_yarn_mscales(const hf::ConfigJson& c, const config::ModelConfig& m) {
  if (m.position_embedding != config::PositionEmbedding::Yarn) return;
  const std::string key = c.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (c.json()[key].value("mscale_all_dim", 0.0) != 0.0 && !m.yarn_mscale_all_dim)
    c.fail(key, "yarn mscale_all_dim without mscale is not converted");
}

void read_deepseek_moe(const hf::ConfigJson& c, config::ModelConfig& m) {
  config::MoeConfig& e = m.moe;
  e.num_experts = c.integer("n_routed_experts");
  e.moe_router_topk = c.integer("num_experts_per_tok");
  e.moe_ffn_hidden_size = c.integer("moe_intermediate_size");
  e.moe_shared_expert_intermediate_size =
      c.integer_or("n_shared_experts", 0) * e.moe_ffn_hidden_size;
  e.moe_router_score_function = config::MoeScoreFunction::Sigmoid;
  e.moe_router_enable_expert_bias = true;
  e.moe_router_topk_scaling_factor = c.number_or("routed_scaling_factor", 1.0);
  if (c.string_or("scoring_func", "sigmoid") != "sigmoid")
    c.fail("scoring_func", "only sigmoid (DeepSeek-V3's) converts");
  if (c.string_or("topk_method", "noaux_tc") != "noaux_tc")
    c.fail("topk_method", "only noaux_tc (group-limited top-k with the score correction bias)");
  if (!c.boolean_or("norm_topk_prob", true) || e.moe_router_topk == 1)
    c.fail("norm_topk_prob", "only renormalized top-k gates (true, more than one expert) convert");
  const int64_t groups = c.integer_or("n_group", 1), group_topk = c.integer_or("topk_group", 1);
  if (groups > 1) {
    // transformers scores a group by its best two experts, Megatron by topk / group_topk.
    if (e.moe_router_topk != 2 * group_topk)
      c.fail("topk_group", concat(group_topk, " with num_experts_per_tok ", e.moe_router_topk,
                                  ": groups score by their best 2 experts here only when "
                                  "num_experts_per_tok = 2 topk_group"));
    e.moe_router_num_groups = groups;
    e.moe_router_group_topk = group_topk;
  }
  if (c.integer_or("moe_layer_freq", 1) != 1) c.fail("moe_layer_freq", "must be 1");
  const int64_t dense = c.integer_or("first_k_dense_replace", 0);
  if (dense < 0 || dense >= m.num_layers)
    c.fail("first_k_dense_replace", concat("must be in [0, num_hidden_layers) (got ", dense, ")"));
  std::vector<int64_t> pattern(static_cast<size_t>(m.num_layers), 1);
  for (int64_t l = 0; l < dense; ++l) pattern[size_t(l)] = 0;
  e.moe_layer_freq =
      dense == 0 ? config::LayerFrequency{1, {}} : config::LayerFrequency{1, pattern};
  const double alpha = c.number_or("aux_loss_alpha", 0.0);
  e.moe_router_load_balancing_type =
      alpha > 0 ? config::MoeLoadBalancing::SeqAuxLoss : config::MoeLoadBalancing::None;
  e.moe_aux_loss_coeff = alpha;
}

// The HF rope rows of one head in the order the rotate-half kernels turn them: with
// rope_interleave the pairs are (2i, 2i + 1), so the evens then the odds.
std::vector<int64_t> rope_rows(int64_t rope_dims, bool interleave) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < rope_dims; ++i)
    rows.push_back(interleave ? (i < rope_dims / 2 ? 2 * i : 2 * (i - rope_dims / 2) + 1) : i);
  return rows;
}

// Native [H, (Dr | Dn)] query rows from HF's [H, (Dn | Dr)] (rope rows reordered).
TensorMapping query_mapping(const std::string& native, const std::string& hf, int64_t H, int64_t Dn,
                            int64_t Dr, int64_t in, bool interleave) {
  TensorMapping t;
  t.native = native;
  t.native_shape = {H * (Dn + Dr), in};
  t.sources.push_back({hf, {H * (Dn + Dr), in}, false});
  const std::vector<int64_t> rope = rope_rows(Dr, interleave);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t r : rope) t.blocks.push_back({0, h * (Dn + Dr) + Dn + r, 1});
    t.blocks.push_back({0, h * (Dn + Dr), Dn});
  }
  t.validate();
  return t;
}

// Native [Rkv + Dr, D] latent rows from kv_a_proj_with_mqa (its rope rows reordered).
TensorMapping latent_mapping(const std::string& native, const std::string& hf, int64_t Rkv,
                             int64_t Dr, int64_t D, bool interleave) {
  TensorMapping t;
  t.native = native;
  t.native_shape = {Rkv + Dr, D};
  t.sources.push_back({hf, {Rkv + Dr, D}, false});
  t.blocks.push_back({0, 0, Rkv});
  for (int64_t r : rope_rows(Dr, interleave)) t.blocks.push_back({0, Rkv + r, 1});
  t.validate();
  return t;
}

void mla_weights(std::vector<TensorMapping>& out, const config::ModelConfig& m, int64_t l,
                 bool interleave) {
  const auto& a = m.mla;
  const int64_t D = m.hidden_size, H = m.num_attention_heads;
  const std::string n = concat("layers.", l, ".attention."),
                    s = concat("model.layers.", l, ".self_attn.");
  if (a.q_lora_rank > 0) {
    out.push_back(
        hf::copy_mapping(n + "q_down.weight", vec({a.q_lora_rank, D}), s + "q_a_proj.weight"));
    out.push_back(hf::copy_mapping(n + "q_down_norm.weight", vec({a.q_lora_rank}),
                                   s + "q_a_layernorm.weight"));
    out.push_back(query_mapping(n + "q_up.weight", s + "q_b_proj.weight", H, a.qk_head_dim,
                                a.qk_pos_emb_head_dim, a.q_lora_rank, interleave));
  } else {
    out.push_back(query_mapping(n + "q.weight", s + "q_proj.weight", H, a.qk_head_dim,
                                a.qk_pos_emb_head_dim, D, interleave));
  }
  out.push_back(latent_mapping(n + "kv_down.weight", s + "kv_a_proj_with_mqa.weight",
                               a.kv_lora_rank, a.qk_pos_emb_head_dim, D, interleave));
  out.push_back(hf::copy_mapping(n + "kv_down_norm.weight", vec({a.kv_lora_rank}),
                                 s + "kv_a_layernorm.weight"));
  out.push_back(hf::copy_mapping(n + "kv_up.weight",
                                 vec({H * (a.qk_head_dim + a.v_head_dim), a.kv_lora_rank}),
                                 s + "kv_b_proj.weight"));
  out.push_back(
      hf::copy_mapping(n + "proj.weight", vec({D, H * a.v_head_dim}), s + "o_proj.weight"));
}

void mlp_weights(std::vector<TensorMapping>& out, const config::ModelConfig& m, int64_t l) {
  const int64_t D = m.hidden_size, E = m.moe.num_experts, Fe = m.moe.expert_ffn(m.ffn());
  const std::string n = concat("layers.", l, ".mlp."), h = concat("model.layers.", l, ".mlp.");
  if (!m.moe.moe_layer_freq.is_moe(l)) return gated_mlp_weights(out, n, h, D, m.ffn());
  out.push_back(hf::copy_mapping(n + "router.weight", vec({E, D}), h + "gate.weight"));
  out.push_back(hf::copy_mapping(concat("moe/expert_bias/layers.", l), vec({E}),
                                 h + "gate.e_score_correction_bias"));
  for (int64_t x = 0; x < E; ++x)
    gated_mlp_weights(out, concat(n, "experts.", x, "."), concat(h, "experts.", x, "."), D, Fe);
  const int64_t Fs = m.moe.moe_shared_expert_intermediate_size;
  if (Fs > 0) gated_mlp_weights(out, n + "shared_experts.", h + "shared_experts.", D, Fs);
}

// What DeepseekV3ForCausalLM can describe: MLA, no biases or q/k norms, sigmoid routing with the
// expert bias (grouped by best-two scores), shared experts as multiples of an expert, the dense
// layers first; an InputError before anything is written otherwise.
void check_deepseek_exportable(const config::ModelConfig& m) {
  const auto& e = m.moe;
  MT_INPUT_CHECK(m.mla.enabled() && e.enabled(), kDeepseekV3,
                 " has multi-latent attention and routed experts: this model "
                 "(model.multi_latent_attention, model.num_experts) is not one");
  MT_INPUT_CHECK(gemma_only_feature(m).empty(), kDeepseekV3, " has no ", gemma_only_feature(m),
                 " (multi-latent attention's softmax scale follows from its head dimensions and "
                 "YaRN's mscale_all_dim)");
  MT_INPUT_CHECK(
      !m.qk_layernorm && !m.sublayer_output_norm && m.attention_window() == 0 && !m.tie_embeddings,
      kDeepseekV3,
      " has pre-norm blocks without q/k norms, windows or a tied head: this model is "
      "not one");
  MT_INPUT_CHECK(
      e.moe_router_score_function == config::MoeScoreFunction::Sigmoid &&
          e.moe_router_enable_expert_bias && !e.moe_router_pre_softmax && e.moe_router_topk > 1 &&
          (e.moe_router_num_groups == 0 || e.moe_router_topk == 2 * e.moe_router_group_topk),
      kDeepseekV3,
      " routes by sigmoid scores with the expert bias (moe_router_enable_expert_bias), "
      "renormalized top-k (> 1) and groups scored by their best two experts "
      "(moe_router_topk = 2 moe_router_group_topk): this model's routing is not that");
  const int64_t Fe = e.expert_ffn(m.ffn());
  MT_INPUT_CHECK(e.moe_shared_expert_intermediate_size % Fe == 0 && !e.moe_shared_expert_gate,
                 kDeepseekV3, " has n_shared_experts ungated experts of ", Fe,
                 " (model.moe_shared_expert_intermediate_size ",
                 e.moe_shared_expert_intermediate_size, ")");
  bool routed = false;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    MT_INPUT_CHECK(!routed || e.moe_layer_freq.is_moe(l), kDeepseekV3,
                   " has its dense layers first (first_k_dense_replace): model.moe_layer_freq "
                   "has a dense layer ",
                   l, " after a routed one");
    routed = routed || e.moe_layer_freq.is_moe(l);
  }
}

}  // namespace

bool is_hf_deepseek(const std::string& architecture) { return architecture == kDeepseekV3; }

config::ModelConfig deepseek_model_from_hf(const hf::ConfigJson& c) {
  c.check_known(deepseek_keys(), kDeepseekV3);
  config::ModelConfig m = llama_style_model(c, 1e-6);
  read_mla(c, m);
  read_rope(c, m);
  check_yarn_mscales(c, m);
  read_deepseek_moe(c, m);
  return m;
}

Json deepseek_hf_config(const config::ModelConfig& m, const std::string& dtype,
                        const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  const auto& a = m.mla;
  const auto& e = m.moe;
  j.erase("quantization_config");  // (the export writes dequantized weights)
  j["architectures"] = {kDeepseekV3};
  j["model_type"] = "deepseek_v3";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.ffn();
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = j["num_key_value_heads"] = m.num_attention_heads;
  j["max_position_embeddings"] = m.max_positions();
  j["rms_norm_eps"] = m.layernorm_epsilon;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["q_lora_rank"] = a.q_lora_rank > 0 ? Json(a.q_lora_rank) : Json(nullptr);
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["qk_nope_head_dim"] = a.qk_head_dim;
  j["qk_rope_head_dim"] = a.qk_pos_emb_head_dim;
  j["v_head_dim"] = a.v_head_dim;
  if (j.contains("qk_head_dim")) j["qk_head_dim"] = a.qk_dims();
  if (j.contains("head_dim")) j["head_dim"] = a.qk_pos_emb_head_dim;
  if (!j.contains("rope_interleave")) j["rope_interleave"] = true;
  j["n_routed_experts"] = e.num_experts;
  j["num_experts_per_tok"] = e.moe_router_topk;
  j["moe_intermediate_size"] = e.expert_ffn(m.ffn());
  j["n_shared_experts"] = e.moe_shared_expert_intermediate_size / e.expert_ffn(m.ffn());
  j["routed_scaling_factor"] = e.moe_router_topk_scaling_factor.value_or(1.0);
  j["n_group"] = std::max<int64_t>(e.moe_router_num_groups, 1);
  j["topk_group"] = std::max<int64_t>(e.moe_router_group_topk, 1);
  j["norm_topk_prob"] = true;
  int64_t dense = 0;
  while (dense < m.num_layers && !e.moe_layer_freq.is_moe(dense)) ++dense;
  j["first_k_dense_replace"] = dense;
  if (e.moe_aux_loss_coeff > 0) j["aux_loss_alpha"] = e.moe_aux_loss_coeff;
  j["tie_word_embeddings"] = m.tie_embeddings;
  write_dtype_and_pad(m, dtype, j);
  write_rope(m, j);
  return j;
}

std::vector<TensorMapping> deepseek_mappings(const config::ModelConfig& m, int64_t Vp,
                                             const nlohmann::json& hf_config) {
  check_deepseek_exportable(m);
  const bool interleave = !hf_config.is_object() || hf_config.value("rope_interleave", true);
  std::vector<TensorMapping> out;
  out.push_back(embed_tokens_weight(m, Vp));
  const int64_t D = m.hidden_size;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
    out.push_back(
        hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "input_layernorm.weight"));
    mla_weights(out, m, l, interleave);
    out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                   h + "post_attention_layernorm.weight"));
    mlp_weights(out, m, l);
  }
  final_norm_and_head(out, m, Vp);
  return out;
}

std::set<std::string> deepseek_ignored_tensors(const config::ModelConfig& m) {
  return llama_style_ignored_tensors(m);
}

}  // namespace megatron::models
