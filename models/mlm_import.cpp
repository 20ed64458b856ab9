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
