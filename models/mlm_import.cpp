#include "models/mlm_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/error.h"
#include "megatron/hf/convert.h"
#include "megatron/mlm/mlm_optimizer.h"
#include "megatron/mlm/mlm_tensors.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"

namespace megatron::models {
namespace {

namespace fs = std::filesystem;
using hf::TensorMapping;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

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
  };
  for (const auto& [key, why] : refused) {
    const checkpoint::PickleValue* v = a.find(key);
    if (!v || v->is(checkpoint::PickleValue::Kind::None)) continue;
    const bool off = (v->is(checkpoint::PickleValue::Kind::Bool) && !v->boolean) ||
                     (v->is(checkpoint::PickleValue::Kind::Int) && v->integer == 0);
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
  const checkpoint::PickleValue* freq = a.find("moe_layer_freq");
  if (freq && !freq->is(checkpoint::PickleValue::Kind::Int))
    a.fail("moe_layer_freq", "a per-layer pattern is not imported yet (an integer is)");
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

namespace {

// A routed layer: the router [E, D] and each expert's fc1 ([gate; up] with SwiGLU) and fc2.
void moe_mappings(std::vector<TensorMapping>& out, const config::ModelConfig& m,
                  const std::string& n, const std::string& p) {
  const int64_t D = m.hidden_size, E = m.moe.num_experts, F = m.moe.expert_ffn(m.ffn());
  const bool gated = m.activation == config::Activation::SwiGLU;
  out.push_back(hf::copy_mapping(n + "router.weight", vec({E, D}), p + "router.weight"));
  for (int64_t x = 0; x < E; ++x) {
    const std::string nx = concat(n, "experts.", x, "."), px = concat(p, "experts.", x, ".");
    out.push_back(gated
                      ? hf::stacked_mapping(nx + "fc1.weight", vec({2, F, D}),
                                            {{px + "linear_fc1.weight", vec({2 * F, D})}})
                      : hf::copy_mapping(nx + "fc1.weight", vec({F, D}), px + "linear_fc1.weight"));
    out.push_back(hf::copy_mapping(nx + "fc2.weight", vec({D, F}), px + "linear_fc2.weight"));
  }
}

}  // namespace

std::vector<TensorMapping> megatron_mappings(const config::ModelConfig& m, int64_t Vp) {
  const int64_t D = m.hidden_size, H = m.num_attention_heads, G = m.query_groups();
  const int64_t Dh = m.head_dim(), F = m.ffn(), QKV = (H + 2 * G) * Dh;
  const bool gated = m.activation == config::Activation::SwiGLU;
  const bool layernorm = m.normalization == config::Normalization::LayerNorm;
  std::vector<TensorMapping> out;
  out.push_back(hf::padded_rows_mapping("embedding.word_embeddings.weight", vec({Vp, D}),
                                        "embedding.word_embeddings.weight", m.vocab_size));
  if (m.position_embedding == config::PositionEmbedding::Learned)
    out.push_back(hf::copy_mapping("embedding.position_embeddings.weight",
                                   vec({m.max_positions(), D}),
                                   "embedding.position_embeddings.weight"));
  auto norm = [&](const std::string& native, const std::string& source) {
    out.push_back(hf::copy_mapping(native + ".weight", vec({D}), source + ".weight"));
    if (layernorm) out.push_back(hf::copy_mapping(native + ".bias", vec({D}), source + ".bias"));
  };
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), s = concat("decoder.layers.", l, ".");
    const std::string a = s + "self_attention.", p = s + "mlp.";
    norm(n + "input_norm", s + "input_layernorm");
    // Megatron-Core's fused QKV rows are already per query group [G, H/G + 2, Dh], as here.
    out.push_back(
        hf::copy_mapping(n + "attention.qkv.weight", vec({QKV, D}), a + "linear_qkv.weight"));
    if (m.add_bias || m.add_qkv_bias)
      out.push_back(hf::copy_mapping(n + "attention.qkv.bias", vec({QKV}), a + "linear_qkv.bias"));
    if (m.qk_layernorm) {
      out.push_back(
          hf::copy_mapping(n + "attention.q_norm.weight", vec({Dh}), a + "q_layernorm.weight"));
      out.push_back(
          hf::copy_mapping(n + "attention.k_norm.weight", vec({Dh}), a + "k_layernorm.weight"));
    }
    out.push_back(
        hf::copy_mapping(n + "attention.proj.weight", vec({D, H * Dh}), a + "linear_proj.weight"));
    if (m.add_bias)
      out.push_back(hf::copy_mapping(n + "attention.proj.bias", vec({D}), a + "linear_proj.bias"));
    norm(n + "post_attention_norm", s + "pre_mlp_layernorm");
    if (m.moe.enabled() && m.moe.moe_layer_freq.is_moe(l)) {
      moe_mappings(out, m, n + "mlp.", p);
      continue;
    }
    // SwiGLU's fc1 is [gate; up] in both: native [2, F, D], Megatron [2F, D].
    out.push_back(
        gated ? hf::stacked_mapping(n + "mlp.fc1.weight", vec({2, F, D}),
                                    {{p + "linear_fc1.weight", vec({2 * F, D})}})
              : hf::copy_mapping(n + "mlp.fc1.weight", vec({F, D}), p + "linear_fc1.weight"));
    if (m.add_bias)
      out.push_back(gated ? hf::stacked_mapping(n + "mlp.fc1.bias", vec({2, F}),
                                                {{p + "linear_fc1.bias", vec({2 * F})}})
                          : hf::copy_mapping(n + "mlp.fc1.bias", vec({F}), p + "linear_fc1.bias"));
    out.push_back(hf::copy_mapping(n + "mlp.fc2.weight", vec({D, F}), p + "linear_fc2.weight"));
    if (m.add_bias)
      out.push_back(hf::copy_mapping(n + "mlp.fc2.bias", vec({D}), p + "linear_fc2.bias"));
  }
  norm("final_norm", "decoder.final_layernorm");
  if (!m.tie_embeddings)
    out.push_back(hf::padded_rows_mapping("output_layer.weight", vec({Vp, D}),
                                          "output_layer.weight", m.vocab_size));
  return out;
}

namespace {

constexpr const char* kMoments[] = {"exp_avg", "exp_avg_sq"};

// The model's tensors and, named optimizer.<moment>.<tensor>, the optimizer's moments of each.
class WithOptimizerState final : public hf::TensorSource {
 public:
  WithOptimizerState(const mlm::MlmTensors& model, const mlm::MlmOptimizerState* state)
      : model_(model), state_(state) {}
  std::string description() const override { return model_.description(); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out = model_.names();
    if (state_)
      for (const std::string& n : model_.names())
        for (const char* m : kMoments) out.push_back(concat("optimizer.", m, ".", n));
    std::sort(out.begin(), out.end());
    return out;
  }
  bool has(const std::string& name) const override {
    std::string kind;
    return model_.has(base(name, kind)) && (kind.empty() || state_ != nullptr);
  }
  std::vector<int64_t> shape(const std::string& name) const override {
    std::string kind;
    return model_.shape(base(name, kind));
  }
  std::string where(const std::string& name) const override {
    std::string kind;
    return model_.where(base(name, kind));
  }
  std::string unreadable(const std::string& name) const override {
    std::string kind;
    return model_.unreadable(base(name, kind));
  }
  std::vector<float> read(const std::string& name,
                          const std::vector<int64_t>& shape) const override {
    std::string kind;
    const std::string b = base(name, kind);
    if (kind.empty()) return model_.read(b, shape);
    MT_CHECK(model_.shape(b) == shape, "optimizer state of ", b, " asked for another shape");
    return state_->read(kind, b);
  }

 private:
  // The model tensor a name refers to; `kind` the moment, or empty for the tensor itself.
  static std::string base(const std::string& name, std::string& kind) {
    for (const char* m : kMoments) {
      const std::string prefix = concat("optimizer.", m, ".");
      if (name.rfind(prefix, 0) == 0) {
        kind = m;
        return name.substr(prefix.size());
      }
    }
    kind.clear();
    return name;
  }
  const mlm::MlmTensors& model_;
  const mlm::MlmOptimizerState* state_;
};

// Adam's moments of every mapped parameter: optim/<moment>/<native> from the same rows as the
// parameter, placed as it is.
void add_moment_mappings(hf::ImportRequest& req) {
  const size_t params = req.mappings.size();
  for (const char* m : kMoments)
    for (size_t i = 0; i < params; ++i) {
      TensorMapping moment = req.mappings[i];
      if (moment.native.rfind("moe/", 0) == 0) continue;  // not a parameter
      const std::string native = concat("optim/", m, "/", moment.native);
      for (hf::HfSource& src : moment.sources) src.name = concat("optimizer.", m, ".", src.name);
      if (const auto it = req.layout.find(moment.native); it != req.layout.end())
        req.layout[native] = it->second;
      moment.native = native;
      req.mappings.push_back(std::move(moment));
    }
}

// The optimizer's state when the checkpoint has it and the import takes it; null otherwise.
std::unique_ptr<mlm::MlmOptimizerState> optimizer_state(const MegatronImportOptions& o,
                                                        const mlm::MlmCheckpoint& ck,
                                                        const mlm::MlmTensors& tensors) {
  if (o.weights_only || !mlm::has_optimizer_state(ck)) return nullptr;
  const mlm::MlmArgs& a = ck.args;
  if (a.boolean_or("bf16", false) || a.boolean_or("fp16", false))
    a.fail(a.boolean_or("bf16", false) ? "bf16" : "fp16",
           "the optimizer state of a 16-bit run is not imported yet (--weights-only takes the "
           "weights alone)");
  if (a.string_or("optimizer", "adam") != "adam")
    a.fail("optimizer", "Adam's state is imported (--weights-only takes the weights alone)");
  return std::make_unique<mlm::MlmOptimizerState>(ck, tensors);
}

void check_output_dir(const std::string& out_dir) {
  std::error_code ec;
  if (fs::is_directory(out_dir, ec) && !fs::is_empty(out_dir, ec))
    throw InputError(concat(out_dir, " is not empty (it holds ",
                            fs::directory_iterator(out_dir)->path().filename().string(),
                            "): import into a new or empty directory; nothing is overwritten"));
}

config::Recipe recipe_for(const MegatronImportOptions& o, const mlm::MlmCheckpoint& ck,
                          const config::ModelConfig& model, bool resume, std::string& yaml) {
  if (!o.recipe.empty()) {
    config::Recipe r = config::load_recipe(o.recipe, o.overrides);
    check_recipe_matches(r, model, ck.args.where() + " (args)");
    return r;
  }
  config::Recipe r;
  r.model = model;
  training_from_megatron_args(ck.args, r);
  r.parallel.tensor = o.tp.value_or(1);
  r.parallel.pipeline = o.pp.value_or(1);
  r.parallel.expert = o.ep.value_or(1);
  r.data.mock = true;
  r.data.tokenizer.type = config::TokenizerType::Null;
  r.data.tokenizer.vocab_size = model.vocab_size;
  r.checkpoint.load = fs::absolute(o.out_dir).lexically_normal().string();
  // With the optimizer's state the run continues; without, it fine-tunes from the weights.
  r.checkpoint.finetune = !resume;
  yaml = concat("# Written by convert_checkpoint from the Megatron-LM checkpoint ", ck.dir,
                ".\n# Model, training, optimizer and schedule come from its args "
                "(megatron_args.txt says\n# which); choose the data (data.mock trains on "
                "synthetic tokens).\n",
                resume ? "# checkpoint.load continues the run (the optimizer's state came along).\n"
                       : "# checkpoint.finetune: the weights only.\n",
                r.to_yaml());
  return config::parse_recipe_string(yaml, (fs::path(o.out_dir) / "recipe.yaml").string());
}

}  // namespace

MegatronImportResult import_megatron_checkpoint(const MegatronImportOptions& o) {
  const mlm::MlmCheckpoint ck = mlm::open_checkpoint(o.megatron_dir, o.iteration);
  const config::ModelConfig model = model_from_megatron_args(ck.args);
  check_output_dir(o.out_dir);
  const mlm::MlmTensors tensors(ck);
  const std::unique_ptr<mlm::MlmOptimizerState> state = optimizer_state(o, ck, tensors);
  std::string yaml;
  config::Recipe recipe = recipe_for(o, ck, model, state != nullptr, yaml);
  MegatronImportResult result;
  recipe.parallel.tensor = result.tp = o.tp.value_or(recipe.parallel.tensor);
  recipe.parallel.pipeline = result.pp = o.pp.value_or(recipe.parallel.pipeline);
  recipe.parallel.expert = result.ep = o.ep.value_or(recipe.parallel.expert);
  recipe.validate();
  const NativeLayout layout = native_layout(recipe, result.tp, result.pp, result.ep);
  hf::ImportRequest req;
  req.mappings = megatron_mappings(model, layout.padded_vocab);
  check_mappings(req.mappings, layout, "Megatron-LM GPT");
  req.layout = layout.placement;
  req.model_description = "its args describe";
  // Tied embeddings under pipeline parallelism: the last stage keeps a copy of the embedding
  // as its output layer (the legacy format saves it; torch_dist saves it once).
  if (model.tie_embeddings) req.ignored.insert("output_layer.weight");
  if (state) {
    add_moment_mappings(req);
    if (model.tie_embeddings)
      for (const char* m : kMoments)
        req.ignored.insert(concat("optimizer.", m, ".output_layer.weight"));
    result.optimizer_state = true;
    result.optimizer_sharding = mlm::sharding_name(state->sharding());
    result.optimizer_steps = static_cast<int64_t>(state->step());
  }
  req.out_dir = o.out_dir;
  req.iteration = ck.iteration;
  result.iteration = ck.iteration;
  result.consumed_samples = ck.args.integer_or("consumed_train_samples", 0);
  result.format = mlm::format_name(ck.format);
  result.source_dir = ck.dir;
  result.source_tp = ck.tp;
  result.source_pp = ck.pp;
  result.source_ep = ck.ep;
  req.metadata = {
      {"iteration", ck.iteration},
      {"consumed_samples", result.consumed_samples},
      {"model", {{"vocab_size", model.vocab_size}, {"padded_vocab_size", layout.padded_vocab}}},
      {"layout",
       {{"tp", result.tp},
        {"pp", result.pp},
        {"dp", 1},
        {"ep", 1},
        {"distributed_optimizer", false}}},
      {"recipe", recipe.to_json()},
      {"optimizer_steps", result.optimizer_steps},
      {"optimizer_type", std::string(config::option_name(recipe.optimizer.type))},
      {"megatron",
       {{"format", result.format},
        {"source", fs::absolute(ck.dir).lexically_normal().string()},
        {"tp", ck.tp},
        {"pp", ck.pp},
        {"dtype", tensors.common_dtype()}}}};
  hf::import_to_native(WithOptimizerState(tensors, state.get()), req);
  result.tensors = req.mappings.size();
  result.args_report_path = (fs::path(o.out_dir) / "megatron_args.txt").string();
  checkpoint::io::write_file_atomic(result.args_report_path, megatron_args_report(ck.args), ".tmp");
  if (!yaml.empty()) {
    result.recipe_path = (fs::path(o.out_dir) / "recipe.yaml").string();
    checkpoint::io::write_file_atomic(result.recipe_path, yaml, ".tmp");
  }
  return result;
}

}  // namespace megatron::models
