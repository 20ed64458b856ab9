#include "megatron/hf/hf_config.h"

#include <cmath>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/error.h"

namespace megatron::hf {

namespace {

// Keys that do not change the weights or the forward pass of a converted model.
const std::set<std::string>& neutral_keys() {
  static const std::set<std::string> keys = {"_name_or_path",
                                             "architectures",
                                             "model_type",
                                             "transformers_version",
                                             "torch_dtype",
                                             "dtype",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "id2label",
                                             "label2id",
                                             "initializer_range",
                                             "use_cache",
                                             "return_dict",
                                             "output_attentions",
                                             "output_hidden_states",
                                             "problem_type",
                                             "chunk_size_feed_forward",
                                             "is_encoder_decoder",
                                             "tokenizer_class",
                                             "prefix",
                                             "task_specific_params",
                                             "finetuning_task",
                                             "gradient_checkpointing",
                                             "classifier_dropout",
                                             "attention_dropout",
                                             "attn_pdrop",
                                             "embd_pdrop",
                                             "resid_pdrop",
                                             "hidden_dropout_prob",
                                             "attention_probs_dropout_prob",
                                             "summary_activation",
                                             "summary_first_dropout",
                                             "summary_proj_to_labels",
                                             "summary_type",
                                             "summary_use_proj",
                                             "tie_encoder_decoder",
                                             "_attn_implementation_autoset",
                                             "output_router_logits",
                                             "n_ctx",
                                             "position_embedding_type",
                                             "tf_legacy_loss",
                                             "pruned_heads",
                                             "torchscript",
                                             "use_bfloat16",
                                             "num_labels"};
  return keys;
}

}  // namespace

ConfigJson ConfigJson::load(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(checkpoint::io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(concat(path, ": invalid JSON: ", e.what()));
  }
  if (!j.is_object()) throw InputError(concat(path, ": not a JSON object"));
  return ConfigJson(std::move(j), path);
}

ConfigJson::ConfigJson(nlohmann::json j, std::string path)
    : j_(std::move(j)), path_(std::move(path)) {}

bool ConfigJson::has(const std::string& key) const {
  return j_.contains(key) && !j_[key].is_null();
}

void ConfigJson::fail(const std::string& key, const std::string& problem) const {
  throw InputError(concat(path_, ": \"", key, "\": ", problem));
}

const nlohmann::json& ConfigJson::at(const std::string& key) const {
  if (!has(key)) fail(key, "missing (required)");
  return j_[key];
}

int64_t ConfigJson::integer(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_number_integer()) fail(key, concat("must be an integer (got ", v.dump(), ")"));
  return v.get<int64_t>();
}
int64_t ConfigJson::integer_or(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}
double ConfigJson::number(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail(key, concat("must be a finite number (got ", v.dump(), ")"));
  return v.get<double>();
}
double ConfigJson::number_or(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}
bool ConfigJson::boolean_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_[key].is_boolean()) fail(key, concat("must be true or false (got ", j_[key].dump(), ")"));
  return j_[key].get<bool>();
}
std::string ConfigJson::string_or(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j_[key].is_string()) fail(key, concat("must be a string (got ", j_[key].dump(), ")"));
  return j_[key].get<std::string>();
}

std::string ConfigJson::architecture() const {
  const auto& a = at("architectures");
  if (!a.is_array() || a.size() != 1 || !a[0].is_string())
    fail("architectures", concat("must list exactly one architecture (got ", a.dump(), ")"));
  return a[0].get<std::string>();
}

void ConfigJson::check_known(const std::set<std::string>& known,
                             const std::string& architecture) const {
  for (const auto& [key, value] : j_.items())
    if (!known.count(key) && !neutral_keys().count(key))
      fail(key, concat("is not a key the ", architecture,
                       " converter understands (a feature it does not implement?); value ",
                       value.dump()));
}

}  // namespace megatron::hf
