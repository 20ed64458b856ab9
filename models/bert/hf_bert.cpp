#include "models/bert/hf_bert.h"

#include <algorithm>

#include "megatron/core/error.h"

namespace megatron::models {

namespace {

using Json = nlohmann::ordered_json;
constexpr const char* kPreTraining = "BertForPreTraining";
constexpr const char* kMaskedLM = "BertForMaskedLM";
constexpr int64_t kMaxDefaultSeq = 512;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

}  // namespace

bool is_hf_bert(const std::string& a) { return a == kPreTraining || a == kMaskedLM; }
bool hf_bert_binary_head(const std::string& a) { return a == kPreTraining; }
std::string bert_architecture_for(bool binary_head) {
  return binary_head ? kPreTraining : kMaskedLM;
}

config::ModelConfig bert_model_from_hf(const hf::ConfigJson& c, const std::string& arch) {
  c.check_known(
      {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
       "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
       "position_embedding_type", "is_decoder", "add_cross_attention", "tie_word_embeddings"},
      arch);
  config::ModelConfig m;
  m.arch = config::Arch::BERT;
  m.num_layers = c.integer("num_hidden_layers");
  m.hidden_size = c.integer("hidden_size");
  m.num_attention_heads = c.integer("num_attention_heads");
  m.ffn_hidden_size = c.integer("intermediate_size");
  m.max_position_embeddings = c.integer("max_position_embeddings");
  m.seq_length = std::min(m.max_position_embeddings, kMaxDefaultSeq);
  m.vocab_size = c.integer("vocab_size");
  m.layernorm_epsilon = c.number_or("layer_norm_eps", 1e-12);
  m.init_method_std = c.number_or("initializer_range", 0.02);
  m.normalization = config::Normalization::LayerNorm;
  m.position_embedding = config::PositionEmbedding::Learned;
  m.add_bias = true;
  m.tie_embeddings = true;
  const std::string act = c.string_or("hidden_act", "gelu");
  if (act == "gelu")
    m.activation = config::Activation::GeLUExact;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    m.activation = config::Activation::GeLU;
  else
    c.fail("hidden_act", concat("'", act, "' is not a GELU this model computes (gelu, gelu_new)"));
  if (c.integer_or("type_vocab_size", 2) != 2)
    c.fail("type_vocab_size", concat(c.integer("type_vocab_size"), " (only 2 token types)"));
  if (c.string_or("position_embedding_type", "absolute") != "absolute")
    c.fail("position_embedding_type",
           concat("'", c.string_or("position_embedding_type", ""), "' (only absolute)"));
  if (c.boolean_or("is_decoder", false)) c.fail("is_decoder", "true is not supported");
  if (c.boolean_or("add_cross_attention", false))
    c.fail("add_cross_attention", "true is not supported");
  if (!c.boolean_or("tie_word_embeddings", true))
    c.fail("tie_word_embeddings", "false (BERT's decoder is the word embedding here)");
  return m;
}

Json bert_hf_config(const config::ModelConfig& m, const std::string& arch, const std::string& dtype,
                    const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  j["architectures"] = {arch};
  j["model_type"] = "bert";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["intermediate_size"] = m.ffn();
  j["hidden_act"] = m.activation == config::Activation::GeLUExact ? "gelu" : "gelu_new";
  j["max_position_embeddings"] = m.max_positions();
  j["type_vocab_size"] = 2;
  j["layer_norm_eps"] = m.layernorm_epsilon;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
  j.erase("dtype");
  return j;
}

std::vector<hf::TensorMapping> bert_mappings(const std::string& arch, const config::ModelConfig& m,
                                             int64_t Vp) {
  const int64_t D = m.hidden_size, H = m.num_attention_heads, Dh = m.head_dim(), F = m.ffn(),
                V = m.vocab_size;
  MT_INPUT_CHECK(H * Dh == D, "model.kv_channels ", Dh, " gives a query width ", H * Dh,
                 " other than hidden_size ", D, ": ", arch, " has no head_dim to describe it");
  std::vector<hf::TensorMapping> out;
  const std::string e = "bert.embeddings.";
  out.push_back(hf::padded_rows_mapping("embedding.word_embeddings.weight", vec({Vp, D}),
                                        e + "word_embeddings.weight", V));
  out.push_back(hf::copy_mapping("embedding.position_embeddings.weight",
                                 vec({m.max_positions(), D}), e + "position_embeddings.weight"));
  out.push_back(hf::copy_mapping("embedding.tokentype_embeddings.weight", vec({2, D}),
                                 e + "token_type_embeddings.weight"));
  out.push_back(hf::copy_mapping("embedding.norm.weight", vec({D}), e + "LayerNorm.weight"));
  out.push_back(hf::copy_mapping("embedding.norm.bias", vec({D}), e + "LayerNorm.bias"));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), h = concat("bert.encoder.layer.", l, ".");
    const std::string s = h + "attention.self.";
    for (const char* kind : {"weight", "bias"}) {
      const bool w = std::string(kind) == "weight";
      const std::vector<int64_t> shape = w ? vec({3 * D, D}) : vec({3 * D});
      const std::vector<int64_t> part = w ? vec({D, D}) : vec({D});
      out.push_back(hf::qkv_mapping(
          n + "attention.qkv." + kind, shape,
          {{s + "query." + kind, part}, {s + "key." + kind, part}, {s + "value." + kind, part}}, H,
          H, Dh));
    }
    out.push_back(hf::copy_mapping(n + "attention.proj.weight", vec({D, D}),
                                   h + "attention.output.dense.weight"));
    out.push_back(
        hf::copy_mapping(n + "attention.proj.bias", vec({D}), h + "attention.output.dense.bias"));
    // Post-LN: input_norm follows the attention, post_attention_norm the MLP.
    out.push_back(hf::copy_mapping(n + "input_norm.weight", vec({D}),
                                   h + "attention.output.LayerNorm.weight"));
    out.push_back(
        hf::copy_mapping(n + "input_norm.bias", vec({D}), h + "attention.output.LayerNorm.bias"));
    out.push_back(
        hf::copy_mapping(n + "mlp.fc1.weight", vec({F, D}), h + "intermediate.dense.weight"));
    out.push_back(hf::copy_mapping(n + "mlp.fc1.bias", vec({F}), h + "intermediate.dense.bias"));
    out.push_back(hf::copy_mapping(n + "mlp.fc2.weight", vec({D, F}), h + "output.dense.weight"));
    out.push_back(hf::copy_mapping(n + "mlp.fc2.bias", vec({D}), h + "output.dense.bias"));
    out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                   h + "output.LayerNorm.weight"));
    out.push_back(
        hf::copy_mapping(n + "post_attention_norm.bias", vec({D}), h + "output.LayerNorm.bias"));
  }
  const std::string p = "cls.predictions.";
  out.push_back(
      hf::copy_mapping("lm_head.dense.weight", vec({D, D}), p + "transform.dense.weight"));
  out.push_back(hf::copy_mapping("lm_head.dense.bias", vec({D}), p + "transform.dense.bias"));
  out.push_back(
      hf::copy_mapping("lm_head.norm.weight", vec({D}), p + "transform.LayerNorm.weight"));
  out.push_back(hf::copy_mapping("lm_head.norm.bias", vec({D}), p + "transform.LayerNorm.bias"));
  out.push_back(hf::padded_rows_mapping("lm_head.bias", vec({Vp}), p + "bias", V));
  if (hf_bert_binary_head(arch)) {
    out.push_back(hf::copy_mapping("pooler.dense.weight", vec({D, D}), "bert.pooler.dense.weight"));
    out.push_back(hf::copy_mapping("pooler.dense.bias", vec({D}), "bert.pooler.dense.bias"));
    out.push_back(
        hf::copy_mapping("binary_head.weight", vec({2, D}), "cls.seq_relationship.weight"));
    out.push_back(hf::copy_mapping("binary_head.bias", vec({2}), "cls.seq_relationship.bias"));
  }
  return out;
}

std::set<std::string> bert_ignored_tensors(const std::string&, const config::ModelConfig&) {
  // The tied decoder's copies and the position/type id buffers older checkpoints carry.
  return {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
          "bert.embeddings.position_ids", "bert.embeddings.token_type_ids"};
}

}  // namespace megatron::models
