#include "models/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/chat_template_jinja.h"
#include "data/tokenizer_export.h"
#include "megatron/checkpoint/file_io.h"
#include "megatron/hf/convert.h"
#include "megatron/hf/hf_dtype.h"
#include "models/gpt/hf_gemma3_multimodal.h"
#include "models/gpt/hf_gpt_oss.h"
#include "models/hf_models.h"
#include "models/registry.h"

namespace megatron::models {

namespace fs = std::filesystem;

namespace {

// The layers without rotary embeddings (model.no_rope_freq), as "[1, 3]".
std::string nope_layers(const config::ModelConfig& m) {
  std::string out;
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (m.rotary() && m.skips_rope(l)) out += concat(out.empty() ? "" : ", ", l);
  return "[" + out + "]";
}

// The multi-latent attention and mixture-of-experts keys of check_recipe_matches.
template <typename Same>
void same_attention_and_experts(const Same& same, const config::ModelConfig& m,
                                const config::ModelConfig& hf) {
  auto name = [](auto option) { return std::string(config::option_name(option)); };
  same("multi_latent_attention", m.mla.enabled(), hf.mla.enabled());
  if (hf.mla.enabled()) {
    same("q_lora_rank", m.mla.q_lora_rank, hf.mla.q_lora_rank);
    same("kv_lora_rank", m.mla.kv_lora_rank, hf.mla.kv_lora_rank);
    same("qk_head_dim", m.mla.qk_head_dim, hf.mla.qk_head_dim);
    same("qk_pos_emb_head_dim", m.mla.qk_pos_emb_head_dim, hf.mla.qk_pos_emb_head_dim);
    same("v_head_dim", m.mla.v_head_dim, hf.mla.v_head_dim);
  }
  const config::MoeConfig &e = m.moe, &h = hf.moe;
  same("num_experts", e.num_experts, h.num_experts);
  if (!h.enabled()) return;
  same("moe_router_topk", e.moe_router_topk, h.moe_router_topk);
  same("moe_ffn_hidden_size", e.expert_ffn(m.ffn()), h.expert_ffn(hf.ffn()));
  same("moe_shared_expert_intermediate_size", e.moe_shared_expert_intermediate_size,
       h.moe_shared_expert_intermediate_size);
  same("moe_shared_expert_gate", e.moe_shared_expert_gate, h.moe_shared_expert_gate);
  same("moe_router_pre_softmax", e.moe_router_pre_softmax, h.moe_router_pre_softmax);
  same("moe_router_score_function", name(e.moe_router_score_function),
       name(h.moe_router_score_function));
  same("moe_router_num_groups", e.moe_router_num_groups, h.moe_router_num_groups);
  same("moe_router_group_topk", e.moe_router_group_topk, h.moe_router_group_topk);
  same("moe_router_enable_expert_bias", e.moe_router_enable_expert_bias,
       h.moe_router_enable_expert_bias);
  same("moe_layer_freq (every layer)", e.moe_layer_freq == h.moe_layer_freq, true);
  same("moe_router_topk_scaling_factor", e.moe_router_topk_scaling_factor.value_or(1.0),
       h.moe_router_topk_scaling_factor.value_or(1.0));
}

// GPT-OSS's block keys and the per-layer windows of check_recipe_matches.
template <typename Same>
void same_block_features(const Same& same, const config::ModelConfig& m,
                         const config::ModelConfig& hf) {
  same("softmax_type", std::string(config::option_name(m.softmax_type)),
       std::string(config::option_name(hf.softmax_type)));
  same("glu_linear_offset", m.glu_linear_offset, hf.glu_linear_offset);
  same("activation_func_clamp_value", m.activation_func_clamp_value,
       hf.activation_func_clamp_value);
  std::string ours, theirs;  // the window of each layer
  for (int64_t l = 0; l < std::min(m.num_layers, hf.num_layers); ++l) {
    ours += concat(l == 0 ? "" : " ", m.layer_window(l));
    theirs += concat(l == 0 ? "" : " ", hf.layer_window(l));
  }
  same("window_attn_skip_freq (each layer's window)", ours, theirs);
}

}  // namespace

void check_recipe_matches(const config::Recipe& r, const config::ModelConfig& hf,
                          const std::string& config_path) {
  const config::ModelConfig& m = r.model;
  auto same = [&](const char* key, const auto& recipe_value, const auto& hf_value) {
    if (recipe_value == hf_value) return;
    throw InputError(concat(r.source_path, ": model.", key, " is ", recipe_value, " but ",
                            config_path, " describes ", hf_value));
  };
  auto name = [](auto option) { return std::string(config::option_name(option)); };
  same("arch", name(m.arch), name(hf.arch));
  same("num_layers", m.num_layers, hf.num_layers);
  same("hidden_size", m.hidden_size, hf.hidden_size);
  same("num_attention_heads", m.num_attention_heads, hf.num_attention_heads);
  same("num_query_groups", m.query_groups(), hf.query_groups());
  same("kv_channels", m.head_dim(), hf.head_dim());  // resolved: 0 and hidden/heads agree
  same("ffn_hidden_size", m.ffn(), hf.ffn());
  same("normalization", name(m.normalization), name(hf.normalization));
  same("activation", name(m.activation), name(hf.activation));
  same("position_embedding", name(m.position_embedding), name(hf.position_embedding));
  if (hf.rotary()) {
    same("rope_theta", m.rope_theta, hf.rope_theta);
    same("yarn_rotary_scaling_factor", m.yarn_rotary_scaling_factor, hf.yarn_rotary_scaling_factor);
    if (hf.position_embedding == config::PositionEmbedding::Yarn) {
      same("yarn_original_max_position_embeddings", m.yarn_original_max_position_embeddings,
           hf.yarn_original_max_position_embeddings);
      same("yarn_beta_fast", m.yarn_beta_fast, hf.yarn_beta_fast);
      same("yarn_beta_slow", m.yarn_beta_slow, hf.yarn_beta_slow);
      same("yarn_correction_range_round_to_int", m.yarn_correction_range_round_to_int,
           hf.yarn_correction_range_round_to_int);
      // The concentration factor, however the keys spell it.
      same("yarn_mscale", math::yarn_concentration(yarn_params(m)),
           math::yarn_concentration(yarn_params(hf)));
    }
    same("rope_scaling", m.rope_scaling, hf.rope_scaling);
    if (hf.rope_scaling) {
      same("rope_scaling_factor", m.rope_scaling_factor, hf.rope_scaling_factor);
      same("rope_scaling_low_freq_factor", m.rope_scaling_low_freq_factor,
           hf.rope_scaling_low_freq_factor);
      same("rope_scaling_high_freq_factor", m.rope_scaling_high_freq_factor,
           hf.rope_scaling_high_freq_factor);
      same("rope_scaling_original_max_position_embeddings",
           m.rope_scaling_original_max_position_embeddings,
           hf.rope_scaling_original_max_position_embeddings);
    }
    auto list = [](const std::vector<double>& v) { return nlohmann::json(v).dump(); };
    same("longrope_short_factor", list(m.longrope_short_factor), list(hf.longrope_short_factor));
    same("longrope_long_factor", list(m.longrope_long_factor), list(hf.longrope_long_factor));
    same("rope_dynamic_factor", m.rope_dynamic_factor, hf.rope_dynamic_factor);
    same("longrope_original_max_position_embeddings", m.longrope_original_max_position_embeddings,
         hf.longrope_original_max_position_embeddings);
    if (hf.longrope()) same("longrope attention factor", m.longrope_scale(), hf.longrope_scale());
    same("rotary_seq_len_interpolation_factor", m.rotary_seq_len_interpolation_factor,
         hf.rotary_seq_len_interpolation_factor);
  } else
    same("max_position_embeddings", m.max_positions(), hf.max_positions());
  same("window_size (sliding window)", m.attention_window(), hf.attention_window());
  same("tie_embeddings", m.tie_embeddings, hf.tie_embeddings);
  same("add_bias", m.add_bias, hf.add_bias);
  same("add_qkv_bias", m.add_qkv_bias, hf.add_qkv_bias);
  same("qk_layernorm", m.qk_layernorm, hf.qk_layernorm);
  same("no_rope_freq (layers without rope)", nope_layers(m), nope_layers(hf));
  same("layernorm_epsilon", m.layernorm_epsilon, hf.layernorm_epsilon);
  same("vocab_size", m.vocab_size, hf.vocab_size);
  same("softmax_scale", m.softmax_scale.value_or(0.0), hf.softmax_scale.value_or(0.0));
  same_attention_and_experts(same, m, hf);
  same_block_features(same, m, hf);
}

namespace {

// DeepSeek-V3's multi-token-prediction layers (model.layers.{num_hidden_layers + k}.*, as
// released) are left out, as transformers does: multi-token prediction is not built here yet.
void leave_out_mtp_layers(const hf::ConfigJson& c, const hf::TensorSource& tensors,
                          const config::ModelConfig& m, hf::ImportRequest& req,
                          HfImportResult& result) {
  const int64_t mtp = c.integer_or("num_nextn_predict_layers", 0);
  const std::vector<std::string> names = mtp > 0 ? tensors.names() : std::vector<std::string>{};
  for (int64_t k = 0; k < mtp; ++k) {
    const std::string prefix = concat("model.layers.", m.num_layers + k, ".");
    if (std::none_of(names.begin(), names.end(),
                     [&](const std::string& n) { return n.rfind(prefix, 0) == 0; }))
      continue;
    req.ignored_prefixes.push_back(prefix);
    result.left_out.push_back(concat("the multi-token-prediction layer ", prefix,
                                     "* (num_nextn_predict_layers; not built here yet)"));
  }
}

config::Recipe recipe_for_import(const HfImportOptions& o, const config::ModelConfig& model,
                                 const std::string& architecture, std::string& yaml_out) {
  if (!o.recipe.empty() || o.recipe_value != nullptr) {
    config::Recipe r =
        o.recipe_value ? *o.recipe_value : config::load_recipe(o.recipe, o.overrides);
    check_recipe_matches(r, model, (fs::path(o.hf_dir) / "config.json").string());
    MT_INPUT_CHECK(
        model.arch != config::Arch::BERT || r.data.bert_binary_head == hf_binary_head(architecture),
        r.source_path, ": data.bert_binary_head is ", r.data.bert_binary_head, " but ",
        architecture, (hf_binary_head(architecture) ? " has" : " has no"), " sentence-pair head");
    return r;
  }
  config::Recipe r;
  r.model = model;
  r.parallel.tensor = o.tp.value_or(1);
  r.parallel.pipeline = o.pp.value_or(1);
  r.parallel.expert = o.ep.value_or(1);
  r.training.micro_batch_size = 1;
  r.training.global_batch_size = 8;
  r.training.train_iters = 100;
  r.optimizer.lr = 1e-5;
  r.data.mock = true;
  r.data.bert_binary_head = hf_binary_head(architecture);
  // The directory's own tokenizer when it has one, else only the vocabulary size.
  std::error_code ec;
  if (fs::is_regular_file(fs::path(o.hf_dir) / "tokenizer.json", ec) ||
      fs::is_regular_file(fs::path(o.hf_dir) / "tokenizer.model", ec)) {
    r.data.tokenizer.type = config::TokenizerType::HuggingFace;
    r.data.tokenizer.model = fs::absolute(o.hf_dir).lexically_normal().string();
  } else {
    r.data.tokenizer.type = config::TokenizerType::Null;
    r.data.tokenizer.vocab_size = model.vocab_size;
  }
  r.checkpoint.pretrained = fs::absolute(o.out_dir).lexically_normal().string();
  yaml_out = concat("# Written by convert_checkpoint from ", fs::absolute(o.hf_dir).string(),
                    "/config.json.\n# The model section is the converted checkpoint's; choose "
                    "data, training and optimizer\n# for the fine-tuning run (data.mock trains on "
                    "synthetic tokens).\n",
                    r.to_yaml());
  // The recipe comes from the flags and config.json: its checks (heads % tp, layers % pp, ...)
  // name those, not a recipe.yaml:line the user never wrote (nor, on failure, is it written).
  const std::string name = (fs::path(o.out_dir) / "recipe.yaml").string();
  try {
    return config::parse_recipe_string(yaml_out, name);
  } catch (const InputError& e) {
    std::string what = e.what();
    if (what.rfind(name + ":", 0) == 0)
      if (const size_t cut = what.find(": ", name.size()); cut != std::string::npos)
        what = what.substr(cut + 2);
    throw InputError(concat((fs::path(o.hf_dir) / "config.json").string(),
                            " with --tensor-parallel ", r.parallel.tensor, " --pipeline-parallel ",
                            r.parallel.pipeline, " --expert-parallel ", r.parallel.expert, ": ",
                            what));
  }
}

}  // namespace

HfImportResult import_hf_checkpoint(const HfImportOptions& o) {
  const std::string config_path = (fs::path(o.hf_dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(o.hf_dir, ec))
    throw InputError(concat("Hugging Face directory ", o.hf_dir, " does not exist"));
  if (!fs::is_regular_file(config_path, ec))
    throw InputError(concat("Hugging Face directory ", o.hf_dir, " has no config.json"));
  const hf::ConfigJson loaded = hf::ConfigJson::load(config_path);
  // A multimodal Gemma 3 imports its language model (the vision parts left out).
  const bool multimodal = loaded.architecture() == kGemma3Multimodal;
  const hf::ConfigJson cfg = multimodal ? gemma3_text_config(loaded) : loaded;
  const config::ModelConfig model = model_from_hf_config(cfg);
  HfImportResult result;
  result.architecture = cfg.architecture();
  hf::HfTensors files(o.hf_dir);
  // (GPT-OSS's quantization_config, mxfp4, is its fused experts' business)
  const std::vector<hf::FusedExperts> fused = hf_fused_experts(result.architecture, model);
  if (fused.empty()) files.set_fp8_blocks(hf::fp8_blocks_of(loaded));
  const hf::FusedExpertSource tensors(files, fused);
  if (fs::exists(fs::path(o.out_dir) / "latest", ec) ||
      fs::exists(fs::path(o.out_dir) / "iter_0000000", ec))
    throw InputError(concat(o.out_dir, " already holds a checkpoint (nothing is overwritten)"));
  // Any other file there (a recipe.yaml of the user's, another run's output) would be replaced
  // or mixed with the import.
  if (fs::is_directory(o.out_dir, ec) && !fs::is_empty(o.out_dir, ec))
    throw InputError(concat(o.out_dir, " is not empty (it holds ",
                            fs::directory_iterator(o.out_dir)->path().filename().string(),
                            "): import into a new or empty directory; nothing is overwritten"));
  std::string yaml;
  config::Recipe recipe = recipe_for_import(o, model, result.architecture, yaml);
  recipe.parallel.tensor = result.tp = o.tp.value_or(recipe.parallel.tensor);
  recipe.parallel.pipeline = result.pp = o.pp.value_or(recipe.parallel.pipeline);
  recipe.parallel.expert = result.ep = o.ep.value_or(recipe.parallel.expert);
  recipe.validate();
  const NativeLayout layout = native_layout(recipe, result.tp, result.pp, result.ep);
  hf::ImportRequest req;
  req.mappings = hf_mappings(result.architecture, model, layout.padded_vocab, cfg.json());
  for (hf::TensorMapping& m : req.mappings)
    for (hf::HfSource& s : m.sources) {
      if (multimodal) s.name = kGemma3TextPrefix + s.name;
      const std::string other = hf_alternative_name(result.architecture, s.name);
      if (!tensors.has(s.name) && !other.empty() && tensors.has(other)) s.name = other;
    }
  check_mappings(req.mappings, layout, result.architecture);
  req.layout = layout.placement;
  req.ignored = hf_ignored_tensors(result.architecture, model);
  if (multimodal) {
    for (const std::string& name : hf_ignored_tensors(result.architecture, model))
      req.ignored.insert(kGemma3TextPrefix + name);
    req.ignored_prefixes = gemma3_vision_prefixes();
    result.left_out.push_back(
        "the vision tower and projector (vision_tower.*, "
        "multi_modal_projector.*): the language model only");
  }
  leave_out_mtp_layers(cfg, tensors, model, req, result);
  req.out_dir = o.out_dir;
  req.iteration = 0;
  req.metadata = {
      {"iteration", 0},
      {"consumed_samples", 0},
      {"model", {{"vocab_size", model.vocab_size}, {"padded_vocab_size", layout.padded_vocab}}},
      {"layout",
       {{"tp", result.tp},
        {"pp", result.pp},
        {"dp", result.ep},
        {"ep", result.ep},
        {"distributed_optimizer", false}}},
      {"recipe", recipe.to_json()},
      {"hf",
       {{"architecture", result.architecture},
        {"dtype", files.common_dtype()},
        {"source", fs::absolute(o.hf_dir).lexically_normal().string()},
        {"config", cfg.json()}}}};
  hf::import_to_native(tensors, req);
  result.tensors = req.mappings.size();
  if (!yaml.empty()) {
    result.recipe_path = (fs::path(o.out_dir) / "recipe.yaml").string();
    checkpoint::io::write_file_atomic(result.recipe_path, yaml, ".tmp");
  }
  return result;
}

config::Recipe recipe_of_checkpoint(const checkpoint::CheckpointIndex& index) {
  const auto& meta = index.metadata;
  const std::string meta_path = index.path + "/metadata.json";
  if (!meta.contains("recipe") || !meta["recipe"].is_object())
    throw InputError(concat(meta_path, ": no recipe in the metadata"));
  // JSON is YAML: the recorded recipe parses (and validates) like a recipe file.
  config::Recipe recipe = config::parse_recipe_string(meta["recipe"].dump(), meta_path);
  if (meta.contains("model") && meta["model"].contains("vocab_size") &&
      meta["model"]["vocab_size"].is_number_integer())
    recipe.model.vocab_size = meta["model"]["vocab_size"].get<int64_t>();
  if (recipe.model.vocab_size <= 0)
    throw InputError(concat(meta_path, ": the model's vocabulary size is not recorded"));
  return recipe;
}

namespace {
// The tokenizer files that travel with an export, so that it loads in transformers as it is: a
// Hugging Face tokenizer directory's own files, or those data/tokenizer_export.h writes for a
// SentencePiece model or GPT-2's vocab.json + merges.txt; none for the others.
// tokenizer_config.json with the chat template a fine-tuning recipe rendered its data with (as
// Jinja, data/chat_template_jinja.h), unless it has one.
void add_chat_template(const config::Recipe& recipe, std::map<std::string, std::string>& files) {
  if (!recipe.data.sft.enabled() || !files.count("tokenizer_config.json")) return;
  const std::string_view jinja =
      data::chat_template_jinja(data::chat_template_from_name(recipe.data.sft.chat_template));
  if (jinja.empty()) return;
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(files["tokenizer_config.json"]);
  if (config.contains("chat_template")) return;
  config["chat_template"] = std::string(jinja);
  files["tokenizer_config.json"] = config.dump(2) + "\n";
}

std::map<std::string, std::string> tokenizer_files_of(const config::Recipe& recipe);

std::map<std::string, std::string> tokenizer_files(const config::Recipe& recipe) {
  std::map<std::string, std::string> files = tokenizer_files_of(recipe);
  add_chat_template(recipe, files);
  return files;
}

// The tokenizer's own files: a SentencePiece model or GPT-2's vocabulary as HF files, or an HF
// tokenizer directory's.
std::map<std::string, std::string> tokenizer_files_of(const config::Recipe& recipe) {
  const auto& t = recipe.data.tokenizer;
  auto path = [&](const std::string& p) { return config::resolve_path(recipe, p); };
  if (t.type == config::TokenizerType::SentencePiece)
    return data::sentencepiece_hf_files(path(t.model));
  if (t.type == config::TokenizerType::GPT2BPE)
    return data::gpt2_hf_files(path(t.vocab_file), path(t.merge_file));
  std::map<std::string, std::string> files;
  if (t.type != config::TokenizerType::HuggingFace) return files;
  const fs::path dir = path(t.model);
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                           "special_tokens_map.json", "generation_config.json"})
    if (fs::is_directory(dir, ec) && fs::is_regular_file(dir / name, ec))
      files[name] = checkpoint::io::read_file((dir / name).string());
  return files;
}
}  // namespace

namespace {
// GPT-OSS's block features, which only GptOssForCausalLM holds.
std::string gpt_oss_feature(const config::ModelConfig& m) {
  if (m.softmax_type != config::SoftmaxType::Vanilla)
    return concat("model.softmax_type ", config::option_name(m.softmax_type), " (attention sinks)");
  if (m.activation == config::Activation::QuickGeGLU) return "model.activation quick_geglu";
  if (m.glu_linear_offset != 0) return "model.glu_linear_offset";
  if (m.activation_func_clamp_value != 0) return "model.activation_func_clamp_value";
  return {};
}
}  // namespace

HfExportResult export_hf_checkpoint(const HfExportOptions& o) {
  checkpoint::Reader reader(o.native_dir, o.iteration);
  const auto& index = reader.index();
  const std::string meta_path = index.path + "/metadata.json";
  const config::Recipe recipe = recipe_of_checkpoint(index);
  const config::ModelConfig& model = recipe.model;
  const auto& meta = index.metadata;
  const nlohmann::json hf_meta = meta.contains("hf") ? meta["hf"] : nlohmann::json::object();
  HfExportResult result;
  result.checkpoint_path = index.path;
  result.iteration = index.iteration;
  result.architecture = o.architecture;
  if (result.architecture.empty() && hf_meta.contains("architecture") &&
      hf_meta["architecture"].is_string())
    result.architecture = hf_meta["architecture"].get<std::string>();
  if (result.architecture.empty()) result.architecture = hf_architecture_for(recipe);
  const auto supported = hf_architectures();
  if (std::find(supported.begin(), supported.end(), result.architecture) == supported.end())
    throw InputError(
        concat("architecture '", result.architecture, "' is not one this build exports"));
  const std::string unexported = gpt_oss_feature(model);
  MT_INPUT_CHECK(unexported.empty() || result.architecture == kGptOss, meta_path, ": ", unexported,
                 " exports as ", kGptOss, " only (not ", result.architecture, ")");
  result.dtype = o.dtype;
  if (result.dtype.empty() && hf_meta.contains("dtype") && hf_meta["dtype"].is_string())
    result.dtype = hf_meta["dtype"].get<std::string>();
  if (!hf::float_dtype(result.dtype)) result.dtype = "F32";
  const auto embed = index.tensors.find("model/embedding.word_embeddings.weight");
  if (embed == index.tensors.end() || embed->second.shape.empty())
    throw InputError(concat(meta_path, ": no tensor model/embedding.word_embeddings.weight"));
  hf::ExportRequest req;
  const nlohmann::json original = hf_meta.contains("config") ? hf_meta["config"] : nlohmann::json();
  req.mappings = hf_mappings(result.architecture, model, embed->second.shape[0], original);
  req.dtype = result.dtype;
  req.max_shard_bytes = o.max_shard_bytes;
  if (recipe.peft.lora() && o.merge_lora)
    req.lora_scale = static_cast<float>(recipe.peft.alpha / static_cast<double>(recipe.peft.dim));
  req.drop_lora = recipe.peft.lora() && !o.merge_lora;
  req.fused = hf_fused_experts(result.architecture, model);
  req.files["config.json"] =
      hf_config_for(model, result.architecture, result.dtype, original).dump(2) + "\n";
  for (auto& [name, bytes] : tokenizer_files(recipe)) req.files[name] = std::move(bytes);
  hf::export_to_hf(reader, req, o.hf_dir);
  return result;
}

}  // namespace megatron::models
