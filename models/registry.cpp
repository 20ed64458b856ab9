#include "models/registry.h"

#include <cmath>

#include "kernels/common/numeric.h"
#include "megatron/transformer/context_parallel.h"
#include "megatron/transformer/moe/moe_layer.h"

namespace megatron::models {

// Both enums list their values in the same order as the recipe's names (config/options.h).
Recompute recompute_of(config::RecomputeGranularity granularity) {
  constexpr Recompute kOf[] = {Recompute::None, Recompute::Full, Recompute::Selective};
  return kOf[static_cast<size_t>(granularity)];
}

DType model_dtype_of(const config::TrainingConfig& training) {
  constexpr DType kOf[] = {DType::F32, DType::BF16, DType::F16};  // fp32, bf16, fp16
  return kOf[static_cast<size_t>(training.precision)];
}

math::YarnParams yarn_params(const config::ModelConfig& m) {
  math::YarnParams y;
  y.factor = m.yarn_rotary_scaling_factor;
  y.original_max_positions = static_cast<double>(m.yarn_original_max_position_embeddings);
  y.beta_fast = m.yarn_beta_fast;
  y.beta_slow = m.yarn_beta_slow;
  y.mscale = m.yarn_mscale;
  y.mscale_all_dim = m.yarn_mscale_all_dim;
  y.round_to_int = m.yarn_correction_range_round_to_int;
  return y;
}

TransformerSpec transformer_spec_from_model(const config::ModelConfig& m) {
  TransformerSpec t;
  t.num_layers = m.num_layers;
  t.hidden = m.hidden_size;
  t.heads = m.num_attention_heads;
  t.query_groups = m.query_groups();
  t.kv_channels = m.kv_channels;
  t.ffn = m.ffn();
  t.seq_length = m.seq_length;
  t.norm = m.normalization == config::Normalization::RMSNorm ? Norm::Kind::RMSNorm
                                                             : Norm::Kind::LayerNorm;
  t.swiglu = m.gated_activation();
  t.glu_gate = m.activation == config::Activation::GeGLU        ? math::GluGate::GeluTanh
               : m.activation == config::Activation::QuickGeGLU ? math::GluGate::QuickGelu
                                                                : math::GluGate::Silu;
  t.glu_limit = static_cast<float>(m.activation_func_clamp_value);
  t.glu_offset = static_cast<float>(m.glu_linear_offset);
  t.norm_zero_centered_gamma = m.layernorm_zero_centered_gamma;
  t.softmax_scale = m.softmax_scale ? static_cast<float>(*m.softmax_scale) : 0.0f;
  t.attn_logit_softcap = static_cast<float>(m.attn_logit_softcapping);
  t.attention_sinks =
      m.softmax_type == config::SoftmaxType::Learnable  ? TransformerSpec::Sinks::Learned
      : m.softmax_type == config::SoftmaxType::OffByOne ? TransformerSpec::Sinks::Fixed
                                                        : TransformerSpec::Sinks::None;
  t.rope_local_theta = static_cast<float>(m.rope_local_base_freq);
  t.gelu = m.activation == config::Activation::GeLUExact ? math::Gelu::Erf : math::Gelu::Tanh;
  t.rope = m.rotary();
  t.window = m.attention_window();
  t.rope_theta = static_cast<float>(m.rope_theta);
  if (m.position_embedding == config::PositionEmbedding::Yarn) {
    const math::RopeFrequencies y =
        math::yarn_frequencies(t.rope_theta, m.rotary_dims(), yarn_params(m));
    t.rope_yarn_factor = y.yarn_factor;
    t.rope_yarn_low = y.yarn_low;
    t.rope_yarn_range = y.yarn_range;
    t.rope_attention_scale = y.attention_scale;
  }
  t.rope_dynamic_factor = static_cast<float>(m.rope_dynamic_factor);
  t.rope_dynamic_positions = m.max_positions();
  if (m.longrope()) {
    t.longrope_short.assign(m.longrope_short_factor.begin(), m.longrope_short_factor.end());
    t.longrope_long.assign(m.longrope_long_factor.begin(), m.longrope_long_factor.end());
    t.longrope_original = m.longrope_original_max_position_embeddings;
    t.rope_attention_scale = static_cast<float>(m.longrope_scale());
  }
  t.rope_scaling_factor = m.rope_scaling ? static_cast<float>(m.rope_scaling_factor) : 0.0f;
  t.rope_low_freq_factor = static_cast<float>(m.rope_scaling_low_freq_factor);
  t.rope_high_freq_factor = static_cast<float>(m.rope_scaling_high_freq_factor);
  t.rope_original_max_positions =
      static_cast<float>(m.rope_scaling_original_max_position_embeddings);
  t.rope_linear_factor = static_cast<float>(m.rotary_seq_len_interpolation_factor);
  t.bias = m.add_bias;
  t.qkv_bias = m.add_qkv_bias;
  t.qk_norm = m.qk_layernorm;
  t.qk_norm_whole_projection = m.qk_layernorm_span == config::QkNormSpan::Projection;
  t.input_norms = m.sublayer_input_norm;
  t.output_norms = m.sublayer_output_norm;
  t.parallel_residual = m.parallel_residual;
  if (m.rotary() && m.rotary_percent != 1.0) t.rope_rotary_dims = m.rotary_dims();
  if (m.mla.enabled()) {
    t.mla = {m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim,
             m.mla.v_head_dim};
    t.kv_channels = m.head_dim();  // the attention core's query/key head dimension
    t.rope_rotary_dims = m.rotary_dims();
    // YaRN with mscale_all_dim scales MLA's softmax by mscale^2 (Megatron-Core's and
    // DeepSeek's MLA), unless model.softmax_scale says otherwise.
    if (m.position_embedding == config::PositionEmbedding::Yarn && m.yarn_mscale_all_dim &&
        !m.softmax_scale) {
      const double mscale = math::yarn_mscale(m.yarn_rotary_scaling_factor, *m.yarn_mscale_all_dim);
      t.softmax_scale =
          static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(m.head_dim())));
    }
  }
  for (int64_t l = 0; l < m.num_layers; ++l) {
    if (m.rotary() && m.skips_rope(l)) t.no_rope_layers.push_back(l);
    if (m.attention_window() > 0 && m.layer_window(l) == 0) t.full_attention_layers.push_back(l);
  }
  // BERT: bidirectional attention over the padding mask, post-LN blocks (the original).
  t.causal = m.arch != config::Arch::BERT;
  t.post_norm = m.arch == config::Arch::BERT;
  t.hidden_dropout = static_cast<float>(m.hidden_dropout);
  t.attention_dropout = static_cast<float>(m.attention_dropout);
  t.norm_eps = static_cast<float>(m.layernorm_epsilon);
  t.init_std = static_cast<float>(m.init_method_std);
  return t;
}

// model.attention_backend on cuda: auto runs cuDNN's fused attention where it can, fused
// always; context parallelism runs its own block kernels.
kernels::CudnnUse cudnn_attention_of(const config::Recipe& r) {
  if (r.training.device != config::TrainingDevice::CUDA || r.parallel.context > 1)
    return kernels::CudnnUse::Never;
  switch (r.model.attention_backend) {
    case config::AttentionBackend::Auto:
      return kernels::CudnnUse::WhereSupported;
    case config::AttentionBackend::Fused:
      return kernels::CudnnUse::Always;
    default:
      return kernels::CudnnUse::Never;
  }
}

TransformerSpec transformer_spec_from_recipe(const config::Recipe& r, int64_t tp_size) {
  const auto& m = r.model;
  TransformerSpec t = transformer_spec_from_model(m);
  t.seed = r.training.seed;
  t.sequence_parallel = r.parallel.sequence_parallel && tp_size > 1;
  t.recompute = recompute_of(r.training.recompute);
  t.unit_layers = r.parallel.fsdp_unit_layers;
  // Context parallelism, soft-capped scores and attention sinks run the flash kernels
  // (validation refuses an explicit unfused).
  t.flash_attention = m.flash_attention(r.training.device) || r.parallel.context > 1 ||
                      m.attn_logit_softcapping > 0 ||
                      m.softmax_type != config::SoftmaxType::Vanilla;
  t.cudnn_attention = cudnn_attention_of(r);
  t.activation_dtype = model_dtype_of(r.training);
  if (r.peft.lora()) {
    t.lora = LoraSpec{r.peft.dim, static_cast<float>(r.peft.alpha)};
    t.lora.dropout = static_cast<float>(r.peft.dropout);
    t.lora_qkv = r.peft.targets("linear_qkv");
    t.lora_proj = r.peft.targets("linear_proj");
    t.lora_fc1 = r.peft.targets("linear_fc1");
    t.lora_fc2 = r.peft.targets("linear_fc2");
  }
  return t;
}

int64_t model_vocab(const config::Recipe& r, int64_t tokenizer_vocab) {
  const int64_t v = r.model.vocab_size > 0 ? r.model.vocab_size : tokenizer_vocab;
  MT_INPUT_CHECK(v >= tokenizer_vocab, r.source_path, ": model.vocab_size ", r.model.vocab_size,
                 " is smaller than the tokenizer's vocabulary ", tokenizer_vocab);
  return v;
}

namespace {
// v rounded to a 16-bit activation dtype (as a scalar tensor of that dtype multiplies).
float in_dtype(float v, DType dtype) {
  if (dtype == DType::BF16) return math::bf16_bits_to_float(math::float_to_bf16_bits(v));
  if (dtype == DType::F16) return math::fp16_bits_to_float(math::float_to_fp16_bits(v));
  return v;
}
}  // namespace

BertSpec bert_spec_from_recipe(const config::Recipe& r, int64_t tokenizer_vocab, int64_t tp_size) {
  const auto& m = r.model;
  BertSpec s;
  s.transformer = transformer_spec_from_recipe(r, tp_size);
  MT_INPUT_CHECK(!s.transformer.rope, r.source_path,
                 ": model.position_embedding: BERT uses learned positions, not rope");
  MT_INPUT_CHECK(m.tie_embeddings, r.source_path,
                 ": model.tie_embeddings: BERT's masked-LM decoder is tied to the embeddings");
  s.vocab_size = model_vocab(r, tokenizer_vocab);
  s.padded_vocab_size = m.padded_vocab_size(tokenizer_vocab, tp_size);
  s.max_positions = m.max_positions();
  s.binary_head = r.data.bert_binary_head;
  s.embedding_dropout = static_cast<float>(m.hidden_dropout);
  return s;
}

GPTSpec gpt_spec_from_recipe(const config::Recipe& r, int64_t tokenizer_vocab, int64_t tp_size) {
  const auto& m = r.model;
  MT_INPUT_CHECK(m.arch == config::Arch::GPT || m.arch == config::Arch::LLaMA, r.source_path,
                 ": model.arch: '", config::option_name(m.arch),
                 "' is not a decoder (gpt or llama)");
  GPTSpec s;
  s.transformer = transformer_spec_from_recipe(r, tp_size);
  s.vocab_size = model_vocab(r, tokenizer_vocab);
  s.padded_vocab_size = m.padded_vocab_size(tokenizer_vocab, tp_size);
  s.max_positions = s.transformer.rope ? 0 : m.max_positions();
  s.tie_embeddings = m.tie_embeddings;
  s.embedding_dropout = static_cast<float>(m.hidden_dropout);
  if (m.scale_embeddings_by_sqrt_hidden)
    s.embedding_scale =
        in_dtype(std::sqrt(static_cast<float>(m.hidden_size)), s.transformer.activation_dtype);
  s.final_logit_softcap = static_cast<float>(m.final_logit_softcapping);
  return s;
}

namespace {
ContextParallelComm context_parallel_comm(config::CpCommType type) {
  switch (type) {
    case config::CpCommType::P2P:
      return ContextParallelComm::P2P;
    case config::CpCommType::AllGather:
      return ContextParallelComm::AllGather;
    case config::CpCommType::A2A:
      return ContextParallelComm::AllToAll;
  }
  return ContextParallelComm::P2P;
}
}  // namespace

ModelChunks build_model_chunks(const config::Recipe& recipe, int64_t tokenizer_vocab,
                               ParamStore& store, parallel::Communicator& tp, int64_t pp_rank,
                               int64_t pp_size, const moe::MoeGroups& moe_groups,
                               parallel::Communicator* cp) {
  const bool bert = recipe.model.arch == config::Arch::BERT;
  std::optional<GPTSpec> gpt;
  std::optional<BertSpec> bert_spec;
  if (bert)
    bert_spec = bert_spec_from_recipe(recipe, tokenizer_vocab, tp.size());
  else
    gpt = gpt_spec_from_recipe(recipe, tokenizer_vocab, tp.size());
  ModelChunks out;
  out.transformer = bert ? bert_spec->transformer : gpt->transformer;
  out.vocab_size = bert ? bert_spec->vocab_size : gpt->vocab_size;
  out.padded_vocab = bert ? bert_spec->padded_vocab_size : gpt->padded_vocab_size;
  out.tied_embeddings = bert || gpt->tie_embeddings;
  // Virtual stage v holds the v-th group of layers: an even split or parallel.pipeline_layers
  // (one count per virtual stage, in layer order).
  const int64_t vpp = recipe.parallel.virtual_stages();
  const int64_t stages = pp_size * vpp, L = out.transformer.num_layers;
  std::vector<int64_t> counts = recipe.parallel.pipeline_layers;
  if (counts.empty()) {
    MT_INPUT_CHECK(L % stages == 0, recipe.source_path, ": model.num_layers ", L,
                   " does not split evenly over ", stages,
                   " pipeline stages (set parallel.pipeline_layers)");
    counts.assign(static_cast<size_t>(stages), L / stages);
  }
  MT_INPUT_CHECK(static_cast<int64_t>(counts.size()) == stages, recipe.source_path,
                 ": parallel.pipeline_layers has ", counts.size(), " entries for ", stages,
                 " (virtual) pipeline stages");
  BlockSubmodules submodules = dense_submodules();
  if (recipe.model.moe.enabled()) {
    out.moe = std::make_shared<moe::MoeState>(
        moe::moe_spec_from_config(recipe.model.moe, recipe.model.ffn(), recipe.model.add_bias));
    moe::MoeGroups groups = moe_groups;
    if (groups.ep == nullptr) {
      out.single_ep = parallel::make_single_process_communicator("ep");
      groups.ep = out.single_ep.get();
    }
    if (groups.expert_tp == nullptr) groups.expert_tp = &tp;
    MT_INPUT_CHECK(groups.expert_tp->size() == tp.size() ||
                       (groups.expert_tp->size() == 1 && recipe.parallel.sequence_parallel),
                   recipe.source_path, ": expert tensor parallel size ", groups.expert_tp->size(),
                   " under tensor parallel size ", tp.size(), " needs 1 (with ",
                   "parallel.sequence_parallel) or ", tp.size());
    submodules = moe::moe_submodules(groups, out.moe);
  }
  if (cp != nullptr && cp->size() > 1) {
    MT_INPUT_CHECK(cp->size() == recipe.parallel.context, recipe.source_path,
                   ": parallel.context=", recipe.parallel.context,
                   " does not match the context-parallel group (", cp->size(), " ranks)");
    submodules = with_context_parallel(std::move(submodules), *cp,
                                       context_parallel_comm(recipe.parallel.cp_comm_type));
  }
  // One recompute workspace for every chunk of this rank (it holds nothing between calls).
  std::shared_ptr<RecomputeWorkspace> workspace;
  if (out.transformer.recompute != Recompute::None)
    workspace = std::make_shared<RecomputeWorkspace>();
  // ZB-V and DualPipeV place their two chunks in a V: chunk 0 of stage s is virtual stage s,
  // chunk 1 is 2 pp - 1 - s (pipeline/schedule.h).
  const bool v_shape = recipe.parallel.v_placement();
  for (int64_t c = 0; c < vpp; ++c) {
    const int64_t v =
        v_shape ? (c == 0 ? pp_rank : 2 * pp_size - 1 - pp_rank) : c * pp_size + pp_rank;
    ModelStage stage;
    for (int64_t i = 0; i < v; ++i) stage.first_layer += counts[static_cast<size_t>(i)];
    stage.num_layers = counts[static_cast<size_t>(v)];
    stage.pre_process = v == 0;
    stage.post_process = v == stages - 1;
    if (bert)
      out.chunks.push_back(std::make_unique<BertModel>(*bert_spec, store, tp, stage, workspace));
    else
      out.chunks.push_back(
          std::make_unique<GPTModel>(*gpt, store, tp, stage, workspace, submodules));
  }
  // LoRA: only the adapters train; the base model is frozen (no gradient or optimizer memory).
  if (recipe.peft.lora())
    for (Parameter* p : store.params()) p->frozen = !is_lora_parameter(p->name);
  return out;
}

}  // namespace megatron::models
