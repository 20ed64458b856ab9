#include "models/mlm_export.h"

#include <cmath>
#include <filesystem>
#include <map>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/core/error.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"
#include "models/mlm_import.h"

namespace megatron::models {
namespace {

namespace fs = std::filesystem;
using checkpoint::Py;
using checkpoint::PyItem;

const char* tokenizer_type(config::TokenizerType t) {
  switch (t) {
    case config::TokenizerType::GPT2BPE:
      return "GPT2BPETokenizer";
    case config::TokenizerType::SentencePiece:
      return "SentencePieceTokenizer";
    case config::TokenizerType::BertWordPieceLowerCase:
      return "BertWordPieceLowerCase";
    case config::TokenizerType::BertWordPieceCase:
      return "BertWordPieceCase";
    case config::TokenizerType::HuggingFace:
      return "HuggingFaceTokenizer";
    default:
      return "NullTokenizer";
  }
}

const char* decay_style(config::LrDecay d) {
  return d == config::LrDecay::Cosine   ? "cosine"
         : d == config::LrDecay::Linear ? "linear"
                                        : "constant";
}

// The model keys a Megatron-LM run of this model is configured with; refuses what the import
// would refuse (a model Megatron's GPT builder does not make the same way).
void model_args(const config::ModelConfig& m, int64_t padded_vocab, std::vector<PyItem>& a) {
  auto set = [&](const char* k, Py v) { a.push_back({Py::str(k), std::move(v)}); };
  const bool rope = m.position_embedding == config::PositionEmbedding::Rope;
  MT_INPUT_CHECK(rope || m.position_embedding == config::PositionEmbedding::Learned,
                 "model.position_embedding: only learned and rope export to Megatron-LM here");
  MT_INPUT_CHECK(m.activation == config::Activation::SwiGLU ||
                     m.activation == config::Activation::GeLU ||
                     m.activation == config::Activation::GeLUExact,
                 "model.activation: swiglu, gelu and gelu_exact export to Megatron-LM here");
  set("num_layers", Py::integer_value(m.num_layers));
  set("hidden_size", Py::integer_value(m.hidden_size));
  set("ffn_hidden_size", Py::integer_value(m.ffn()));
  set("num_attention_heads", Py::integer_value(m.num_attention_heads));
  set("group_query_attention", Py::boolean_value(m.query_groups() != m.num_attention_heads));
  set("num_query_groups", Py::integer_value(m.query_groups()));
  set("kv_channels", Py::integer_value(m.head_dim()));
  set("seq_length", Py::integer_value(m.seq_length));
  set("max_position_embeddings", Py::integer_value(m.max_positions()));
  set("position_embedding_type", Py::str(rope ? "rope" : "learned_absolute"));
  set("add_position_embedding", Py::boolean_value(true));  // Megatron-LM's default, rope or not
  set("rotary_base", Py::integer_value(static_cast<int64_t>(std::lround(m.rope_theta))));
  set("rotary_percent", Py::real_value(m.rotary_percent));
  set("rotary_interleaved", Py::boolean_value(false));
  set("rotary_seq_len_interpolation_factor",
      m.rotary_seq_len_interpolation_factor == 1.0
          ? Py::none()
          : Py::integer_value(static_cast<int64_t>(m.rotary_seq_len_interpolation_factor)));
  set("use_rope_scaling", Py::boolean_value(m.rope_scaling));
  set("rope_scaling_factor", Py::real_value(m.rope_scaling_factor));
  set("normalization",
      Py::str(m.normalization == config::Normalization::RMSNorm ? "RMSNorm" : "LayerNorm"));
  set("norm_epsilon", Py::real_value(m.layernorm_epsilon));
  set("swiglu", Py::boolean_value(m.activation == config::Activation::SwiGLU));
  set("openai_gelu", Py::boolean_value(m.activation == config::Activation::GeLU));
  set("squared_relu", Py::boolean_value(false));
  set("add_bias_linear", Py::boolean_value(m.add_bias));
  set("add_qkv_bias", Py::boolean_value(m.add_qkv_bias));
  set("untie_embeddings_and_output_weights", Py::boolean_value(!m.tie_embeddings));
  set("qk_layernorm", Py::boolean_value(m.qk_layernorm));
  set("apply_residual_connection_post_layernorm", Py::boolean_value(false));
  set("num_experts", Py::none());
  set("multi_latent_attention", Py::boolean_value(false));
  set("vocab_size", Py::integer_value(m.vocab_size));
  set("padded_vocab_size", Py::integer_value(padded_vocab));
  set("make_vocab_size_divisible_by", Py::integer_value(128));
}

// The native model with its vocabulary as the padded rows it holds (what Megatron loads).
config::ModelConfig padded_model(config::ModelConfig m, int64_t padded_vocab) {
  m.vocab_size = padded_vocab;
  return m;
}

}  // namespace

Py megatron_args_for(const config::Recipe& r, int64_t padded_vocab, int64_t iteration,
                     int64_t consumed_samples, int64_t tp, int64_t pp, mlm::Format format) {
  std::vector<PyItem> a;
  model_args(r.model, padded_vocab, a);
  auto set = [&](const char* k, Py v) { a.push_back({Py::str(k), std::move(v)}); };
  const auto& t = r.training;
  const auto& o = r.optimizer;
  set("tensor_model_parallel_size", Py::integer_value(tp));
  set("pipeline_model_parallel_size", Py::integer_value(pp));
  set("virtual_pipeline_model_parallel_size", Py::none());
  set("expert_model_parallel_size", Py::integer_value(1));
  set("micro_batch_size", Py::integer_value(t.micro_batch_size));
  set("global_batch_size", Py::integer_value(t.global_batch_size));
  set("train_iters", Py::integer_value(t.train_iters));
  set("eval_interval", Py::integer_value(t.eval_interval));
  set("eval_iters", Py::integer_value(t.eval_iters));
  set("seed", Py::integer_value(static_cast<int64_t>(t.seed)));
  set("bf16", Py::boolean_value(t.precision == config::Precision::BF16));
  set("fp16", Py::boolean_value(t.precision == config::Precision::FP16));
  set("params_dtype", Py::global("torch", t.precision == config::Precision::BF16   ? "bfloat16"
                                          : t.precision == config::Precision::FP16 ? "float16"
                                                                                   : "float32"));
  set("lr", Py::real_value(o.lr));
  set("min_lr", Py::real_value(o.min_lr));
  set("weight_decay", Py::real_value(o.weight_decay));
  set("adam_beta1", Py::real_value(o.beta1));
  set("adam_beta2", Py::real_value(o.beta2));
  set("adam_eps", Py::real_value(o.eps));
  set("clip_grad", Py::real_value(o.clip_grad));
  set("lr_warmup_iters", Py::integer_value(o.schedule.warmup_iters));
  set("lr_decay_iters",
      o.schedule.decay_iters ? Py::integer_value(*o.schedule.decay_iters) : Py::none());
  set("lr_decay_style", Py::str(decay_style(o.schedule.decay)));
  set("use_distributed_optimizer", Py::boolean_value(false));
  set("tokenizer_type",
      Py::str(tokenizer_type(r.data.tokenizer.type.value_or(config::TokenizerType::Null))));
  set("ckpt_format", Py::str(mlm::format_name(format)));
  set("iteration", Py::integer_value(iteration));
  set("consumed_train_samples", Py::integer_value(consumed_samples));
  set("consumed_valid_samples", Py::integer_value(0));
  return Py::new_object("argparse", "Namespace", Py::dictionary(a));
}

MegatronExportResult export_megatron_checkpoint(const MegatronExportOptions& o) {
  checkpoint::Reader native(o.native_dir, o.iteration);
  const checkpoint::CheckpointIndex& index = native.index();
  const config::Recipe recipe = recipe_of_checkpoint(index);
  const config::ModelConfig& m = recipe.model;
  MT_INPUT_CHECK(m.arch == config::Arch::GPT || m.arch == config::Arch::LLaMA, index.path, ": a ",
                 config::option_name(m.arch),
                 " model; GPT-family decoders export to Megatron-LM here");
  MT_INPUT_CHECK(!m.moe.enabled() && !m.mla.enabled(), index.path,
                 ": mixture-of-experts and multi-latent attention models do not export to "
                 "Megatron-LM yet");
  MT_INPUT_CHECK(m.softmax_type == config::SoftmaxType::Vanilla, index.path,
                 ": model.softmax_type ", config::option_name(m.softmax_type),
                 ": attention sinks do not export to Megatron-LM here yet");
  const NativeLayout layout = native_layout(recipe, 1, 1, 1);
  const int64_t Vp = layout.padded_vocab;
  std::vector<hf::TensorMapping> mappings = megatron_mappings(padded_model(m, Vp), Vp);
  check_mappings(mappings, layout, "Megatron-LM GPT");
  std::map<std::string, const hf::TensorMapping*> by_source;
  std::vector<mlm::MlmTensorOut> tensors;
  for (const hf::TensorMapping& map : mappings) {
    MT_CHECK(map.sources.size() == 1, "Megatron map of ", map.native, " has several sources");
    by_source[map.sources[0].name] = &map;
    tensors.push_back({map.sources[0].name, map.sources[0].shape});
  }
  // Every model tensor must have a place in Megatron's model (LoRA adapters have none: merge
  // them on an export to Hugging Face instead).
  for (const auto& [name, t] : index.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    bool mapped = false;
    for (const hf::TensorMapping& map : mappings) mapped = mapped || "model/" + map.native == name;
    MT_INPUT_CHECK(mapped, index.path, ": holds '", name,
                   "', which a Megatron-LM GPT model has no place for (LoRA adapters: export "
                   "to Hugging Face, merged)");
  }
  mlm::MlmWriteSpec s;
  s.format = o.format;
  s.root = o.out_dir;
  s.iteration = index.iteration;
  s.num_layers = m.num_layers;
  s.tp = o.tp;
  s.pp = o.pp;
  s.swiglu = m.activation == config::Activation::SwiGLU;
  s.tied_embeddings = m.tie_embeddings;
  s.spec = o.spec;
  const std::string dtype = !o.dtype.empty()                                       ? o.dtype
                            : recipe.training.precision == config::Precision::BF16 ? "BF16"
                                                                                   : "F32";
  s.dtype = dtype == "BF16" ? DType::BF16 : dtype == "F16" ? DType::F16 : DType::F32;
  MT_INPUT_CHECK(o.format == mlm::Format::TorchDist ||
                     (m.num_layers % o.pp == 0 && m.num_attention_heads % o.tp == 0 &&
                      m.query_groups() % o.tp == 0 && m.ffn() % o.tp == 0 && Vp % o.tp == 0),
                 "--tensor-parallel ", o.tp, " --pipeline-parallel ", o.pp,
                 ": the model's layers, heads, query groups, ffn and vocabulary must divide");
  const int64_t consumed = index.metadata.value("consumed_samples", int64_t{0});
  s.args = megatron_args_for(recipe, Vp, index.iteration, consumed,
                             o.format == mlm::Format::Torch ? o.tp : 1,
                             o.format == mlm::Format::Torch ? o.pp : 1, o.format);
  mlm::write_megatron_checkpoint(s, tensors, [&](const std::string& name) {
    const hf::TensorMapping& map = *by_source.at(name);
    return map.export_sources(native.read_whole("model/" + map.native))[0];
  });
  MegatronExportResult r;
  r.iteration = index.iteration;
  r.checkpoint_path = index.path;
  r.dtype = dtype;
  r.padded_vocab = Vp;
  r.tensors = tensors.size();
  return r;
}

}  // namespace megatron::models
