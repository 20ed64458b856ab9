#include "models/mlm_args.h"

#include <map>

#include "megatron/core/error.h"

namespace megatron::models {
namespace {

// args -> recipe keys, for the report (what is not here is ignored).
const std::map<std::string, std::string>& mapped_args() {
  static const std::map<std::string, std::string> m = {
      {"num_layers", "model.num_layers"},
      {"hidden_size", "model.hidden_size"},
      {"ffn_hidden_size", "model.ffn_hidden_size"},
      {"num_attention_heads", "model.num_attention_heads"},
      {"group_query_attention", "model.num_query_groups"},
      {"num_query_groups", "model.num_query_groups"},
      {"kv_channels", "model.kv_channels"},
      {"seq_length", "model.seq_length"},
      {"max_position_embeddings", "model.max_position_embeddings"},
      {"padded_vocab_size", "model.vocab_size"},
      {"position_embedding_type", "model.position_embedding"},
      {"rotary_base", "model.rope_theta"},
      {"rotary_percent", "model.rotary_percent"},
      {"rotary_seq_len_interpolation_factor", "model.rotary_seq_len_interpolation_factor"},
      {"use_rope_scaling", "model.rope_scaling"},
      {"rope_scaling_factor", "model.rope_scaling_factor"},
      {"normalization", "model.normalization"},
      {"norm_epsilon", "model.layernorm_epsilon"},
      {"swiglu", "model.activation"},
      {"openai_gelu", "model.activation"},
      {"add_bias_linear", "model.add_bias"},
      {"add_qkv_bias", "model.add_qkv_bias"},
      {"untie_embeddings_and_output_weights", "model.tie_embeddings"},
      {"qk_layernorm", "model.qk_layernorm"},
      {"num_experts", "model.moe.num_experts"},
      {"moe_ffn_hidden_size", "model.moe.moe_ffn_hidden_size"},
      {"moe_router_topk", "model.moe.moe_router_topk"},
      {"moe_layer_freq", "model.moe.moe_layer_freq"},
      {"moe_router_score_function", "model.moe.moe_router_score_function"},
      {"moe_router_pre_softmax", "model.moe.moe_router_pre_softmax"},
      {"moe_router_num_groups", "model.moe.moe_router_num_groups"},
      {"moe_router_group_topk", "model.moe.moe_router_group_topk"},
      {"moe_router_topk_scaling_factor", "model.moe.moe_router_topk_scaling_factor"},
      {"moe_router_load_balancing_type", "model.moe.moe_router_load_balancing_type"},
      {"moe_aux_loss_coeff", "model.moe.moe_aux_loss_coeff"},
      {"moe_z_loss_coeff", "model.moe.moe_z_loss_coeff"},
      {"moe_expert_capacity_factor", "model.moe.moe_expert_capacity_factor"},
      {"moe_pad_expert_input_to_capacity", "model.moe.moe_pad_expert_input_to_capacity"},
      {"moe_token_drop_policy", "model.moe.moe_token_drop_policy"},
      {"micro_batch_size", "training.micro_batch_size"},
      {"global_batch_size", "training.global_batch_size"},
      {"train_iters", "training.train_iters"},
      {"eval_interval", "training.eval_interval"},
      {"eval_iters", "training.eval_iters"},
      {"seed", "training.seed"},
      {"bf16", "training.precision"},
      {"fp16", "training.precision"},
      {"lr", "optimizer.lr"},
      {"min_lr", "optimizer.min_lr"},
      {"weight_decay", "optimizer.weight_decay"},
      {"adam_beta1", "optimizer.beta1"},
      {"adam_beta2", "optimizer.beta2"},
      {"adam_eps", "optimizer.eps"},
      {"clip_grad", "optimizer.clip_grad"},
      {"lr_warmup_iters", "optimizer.schedule.warmup_iters"},
      {"lr_decay_iters", "optimizer.schedule.decay_iters"},
      {"lr_decay_style", "optimizer.schedule.decay"},
      {"consumed_train_samples", "the checkpoint's consumed samples"},
      {"iteration", "the checkpoint's iteration"},
      {"tensor_model_parallel_size", "the saved layout (read to join the shards)"},
      {"pipeline_model_parallel_size", "the saved layout (read to join the shards)"},
      {"virtual_pipeline_model_parallel_size", "the saved layout (read to join the shards)"},
      {"expert_model_parallel_size", "the saved layout (read to join the shards)"},
  };
  return m;
}

// Settings whose model this import does not build: set (true, non-zero, not None) is an error.
void refuse_unsupported(const mlm::MlmArgs& a) {
  static const std::vector<std::pair<std::string, std::string>> refused = {
      {"moe_shared_expert_intermediate_size", "shared experts are not imported yet"},
      {"moe_router_enable_expert_bias", "aux-loss-free expert biases are not imported yet"},
      {"moe_input_jitter_eps", "input jitter has no equivalent here"},
      {"moe_use_upcycling", "has no equivalent here"},
      {"multi_latent_attention", "multi-latent attention checkpoints are not imported yet"},
      {"mtp_num_layers", "multi-token-prediction layers are not imported yet"},
      {"apply_residual_connection_post_layernorm", "has no equivalent here"},
      {"rotary_interleaved", "interleaved rotary pairs are not imported yet"},
      {"apply_layernorm_1p", "(1 + weight) norms from Megatron are not imported yet"},
      {"squared_relu", "squared ReLU is not an activation here"},
      {"window_size", "sliding-window checkpoints are not imported yet"},
      {"mrope_section", "multimodal rope is not supported"},
      {"quick_geglu", "GPT-OSS's gated unit is not imported yet"},
      {"glu_linear_offset", "GPT-OSS's gated unit is not imported yet"},
      {"activation_func_clamp_value", "GPT-OSS's gated unit is not imported yet"},
  };
  for (const auto& [key, why] : refused) {
    const checkpoint::PickleValue* v = a.find(key);
    if (!v || v->is(checkpoint::PickleValue::Kind::None)) continue;
    const bool off = (v->is(checkpoint::PickleValue::Kind::Bool) && !v->boolean) ||
                     (v->is(checkpoint::PickleValue::Kind::Int) && v->integer == 0) ||
                     (v->is(checkpoint::PickleValue::Kind::Float) && v->real == 0.0);
    if (!off) a.fail(key, why);
  }
}

// Megatron-Core's mixture-of-experts keys, which MoeConfig names alike.
void read_moe(const mlm::MlmArgs& a, config::ModelConfig& m) {
  if (!a.is_set("num_experts")) return;
  config::MoeConfig& e = m.moe;
  e.num_experts = a.integer("num_experts");
  e.moe_ffn_hidden_size = a.integer_or("moe_ffn_hidden_size", 0);
  e.moe_router_topk = a.integer_or("moe_router_topk", 2);
  // An integer N (every N-th layer) or, as Megatron-LM evaluates "([0]*1+[1]*3)", one 0/1 a
  // layer (the recipe's validation checks its length and values).
  const checkpoint::PickleValue* freq = a.find("moe_layer_freq");
  if (freq && (freq->is(checkpoint::PickleValue::Kind::List) ||
               freq->is(checkpoint::PickleValue::Kind::Tuple)))
    e.moe_layer_freq.pattern = a.integer_list("moe_layer_freq");
  else
    e.moe_layer_freq.every = a.integer_or("moe_layer_freq", 1);
  const std::string score = a.string_or("moe_router_score_function", "softmax");
  if (score != "softmax" && score != "sigmoid")
    a.fail("moe_router_score_function", "softmax and sigmoid are routers here");
  e.moe_router_score_function =
      score == "softmax" ? config::MoeScoreFunction::Softmax : config::MoeScoreFunction::Sigmoid;
  e.moe_router_pre_softmax = a.boolean_or("moe_router_pre_softmax", false);
  e.moe_router_num_groups = a.integer_or("moe_router_num_groups", 0);
  e.moe_router_group_topk = a.integer_or("moe_router_group_topk", 0);
  if (a.is_set("moe_router_topk_scaling_factor"))
    e.moe_router_topk_scaling_factor = a.number_or("moe_router_topk_scaling_factor", 1.0);
  const std::string balance = a.string_or("moe_router_load_balancing_type", "aux_loss");
  static const std::map<std::string, config::MoeLoadBalancing> balancing = {
      {"aux_loss", config::MoeLoadBalancing::AuxLoss},
      {"seq_aux_loss", config::MoeLoadBalancing::SeqAuxLoss},
      {"global_aux_loss", config::MoeLoadBalancing::GlobalAuxLoss},
      {"none", config::MoeLoadBalancing::None}};
  if (!balancing.count(balance))
    a.fail("moe_router_load_balancing_type", "aux_loss, seq_aux_loss, global_aux_loss and none");
  e.moe_router_load_balancing_type = balancing.at(balance);
  const checkpoint::PickleValue* aux = a.find("moe_aux_loss_coeff");
  if (aux && aux->is(checkpoint::PickleValue::Kind::List))
    a.fail("moe_aux_loss_coeff", "one coefficient per balancing type is not imported yet");
  e.moe_aux_loss_coeff = a.number_or("moe_aux_loss_coeff", 0.0);
  e.moe_z_loss_coeff = a.number_or("moe_z_loss_coeff", 0.0);
  if (a.is_set("moe_expert_capacity_factor")) {
    e.moe_expert_capacity_factor = a.number_or("moe_expert_capacity_factor", 1.0);
    e.moe_pad_expert_input_to_capacity = a.boolean_or("moe_pad_expert_input_to_capacity", false);
    const std::string drop = a.string_or("moe_token_drop_policy", "probs");
    if (drop != "probs" && drop != "position")
      a.fail("moe_token_drop_policy", "probs and position are policies here");
    e.moe_token_drop_policy =
        drop == "probs" ? config::MoeTokenDropPolicy::Probs : config::MoeTokenDropPolicy::Position;
  }
}

void read_positions(const mlm::MlmArgs& a, config::ModelConfig& m) {
  const std::string pos = a.string_or("position_embedding_type", "learned_absolute");
  if (pos == "learned_absolute") {
    m.position_embedding = config::PositionEmbedding::Learned;
  } else if (pos == "rope") {
    m.position_embedding = config::PositionEmbedding::Rope;
    m.rope_theta = a.number_or("rotary_base", 10000);
    m.rotary_percent = a.number_or("rotary_percent", 1.0);
    m.rotary_seq_len_interpolation_factor = a.number_or("rotary_seq_len_interpolation_factor", 1);
    if (a.boolean_or("use_rope_scaling", false)) {
      m.rope_scaling = true;
      m.rope_scaling_factor = a.number_or("rope_scaling_factor", 8.0);
    }
  } else {
    a.fail("position_embedding_type", "learned_absolute and rope are imported");
  }
}

}  // namespace

config::ModelConfig model_from_megatron_args(const mlm::MlmArgs& a) {
  refuse_unsupported(a);
  if (a.string_or("softmax_type", "vanilla") != "vanilla")
    a.fail("softmax_type", "attention sinks (off-by-one, learnable) are not imported yet");
  config::ModelConfig m;
  m.num_layers = a.integer("num_layers");
  m.hidden_size = a.integer("hidden_size");
  m.num_attention_heads = a.integer("num_attention_heads");
  m.ffn_hidden_size = a.integer_or("ffn_hidden_size", 4 * m.hidden_size);
  if (a.boolean_or("group_query_attention", false))
    m.num_query_groups = a.integer("num_query_groups");
  m.kv_channels = a.integer_or("kv_channels", 0);
  if (m.kv_channels == m.hidden_size / m.num_attention_heads) m.kv_channels = 0;
  m.seq_length = a.integer("seq_length");
  m.max_position_embeddings = a.integer_or("max_position_embeddings", m.seq_length);
  m.vocab_size = a.integer("padded_vocab_size");
  read_positions(a, m);
  const std::string norm = a.string_or("normalization", "LayerNorm");
  if (norm == "LayerNorm")
    m.normalization = config::Normalization::LayerNorm;
  else if (norm == "RMSNorm")
    m.normalization = config::Normalization::RMSNorm;
  else
    a.fail("normalization", "LayerNorm and RMSNorm are imported");
  m.layernorm_epsilon = a.number_or("norm_epsilon", 1e-5);
  // Megatron-Core's GeLU is PyTorch's exact one unless --openai-gelu asks for tanh's.
  m.activation = a.boolean_or("swiglu", false)        ? config::Activation::SwiGLU
                 : a.boolean_or("openai_gelu", false) ? config::Activation::GeLU
                                                      : config::Activation::GeLUExact;
  m.add_bias = a.boolean_or("add_bias_linear", true);
  m.add_qkv_bias = a.boolean_or("add_qkv_bias", false);
  m.tie_embeddings = !a.boolean_or("untie_embeddings_and_output_weights", false);
  m.qk_layernorm = a.boolean_or("qk_layernorm", false);
  read_moe(a, m);
  const bool llama = m.normalization == config::Normalization::RMSNorm &&
                     m.position_embedding == config::PositionEmbedding::Rope;
  m.arch = llama ? config::Arch::LLaMA : config::Arch::GPT;
  return m;
}

void training_from_megatron_args(const mlm::MlmArgs& a, config::Recipe& r) {
  r.training.micro_batch_size = a.integer_or("micro_batch_size", 1);
  r.training.global_batch_size = a.integer_or("global_batch_size", r.training.micro_batch_size);
  r.training.train_iters = a.integer_or("train_iters", 0);
  MT_INPUT_CHECK(r.training.train_iters > 0, a.where(),
                 ": args.train_iters is not set (a run planned by samples): the recipe needs "
                 "training.train_iters");
  r.training.eval_interval = a.integer_or("eval_interval", 0);
  r.training.eval_iters = a.integer_or("eval_iters", 0);
  r.training.seed = static_cast<uint64_t>(a.integer_or("seed", 1234));
  if (a.boolean_or("bf16", false)) r.training.precision = config::Precision::BF16;
  if (a.boolean_or("fp16", false)) r.training.precision = config::Precision::FP16;
  r.optimizer.lr = a.number_or("lr", 1e-4);
  r.optimizer.min_lr = a.number_or("min_lr", 0);
  r.optimizer.weight_decay = a.number_or("weight_decay", 0.01);
  r.optimizer.beta1 = a.number_or("adam_beta1", 0.9);
  r.optimizer.beta2 = a.number_or("adam_beta2", 0.999);
  r.optimizer.eps = a.number_or("adam_eps", 1e-8);
  r.optimizer.clip_grad = a.number_or("clip_grad", 1.0);
  r.optimizer.schedule.warmup_iters = a.integer_or("lr_warmup_iters", 0);
  if (a.is_set("lr_decay_iters")) r.optimizer.schedule.decay_iters = a.integer("lr_decay_iters");
  const std::string style = a.string_or("lr_decay_style", "linear");
  if (style == "cosine")
    r.optimizer.schedule.decay = config::LrDecay::Cosine;
  else if (style == "linear")
    r.optimizer.schedule.decay = config::LrDecay::Linear;
  else if (style == "constant")
    r.optimizer.schedule.decay = config::LrDecay::Constant;
  else
    a.fail("lr_decay_style", "cosine, linear and constant are schedules here");
}

std::string megatron_args_report(const mlm::MlmArgs& a) {
  std::string out = concat("# Megatron-LM args of ", a.where(),
                           ": each mapped to a recipe key or ignored by the import.\n");
  for (const std::string& key : a.keys()) {
    const auto it = mapped_args().find(key);
    out +=
        concat(key, ": ", it != mapped_args().end() ? "mapped to " + it->second : "ignored", "\n");
  }
  return out;
}

}  // namespace megatron::models
