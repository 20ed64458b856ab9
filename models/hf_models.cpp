#include "models/hf_models.h"

#include "models/bert/hf_bert.h"
#include "models/gpt/hf_decoder.h"
#include "models/gpt/hf_deepseek.h"
#include "models/gpt/hf_gemma.h"
#include "models/gpt/hf_gemma3_multimodal.h"
#include "models/gpt/hf_gpt_oss.h"
#include "models/gpt/hf_neox.h"
#include "models/gpt/hf_olmo2.h"
#include "models/registry.h"

namespace megatron::models {

namespace {

// A group member that never communicates: building a model only registers its parameters, and
// each parameter's shard follows from rank() and size().
class LayoutOnlyCommunicator final : public parallel::Communicator {
 public:
  LayoutOnlyCommunicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override { return group_rank; }
  void all_reduce(Tensor&, parallel::ReduceOp) override { refuse(); }
  std::unique_ptr<parallel::Work> all_reduce_async(Tensor&, parallel::ReduceOp) override {
    refuse();
  }
  void all_gather(const Tensor&, Tensor&) override { refuse(); }
  std::unique_ptr<parallel::Work> all_gather_async(const Tensor&, Tensor&) override { refuse(); }
  void reduce_scatter(const Tensor&, Tensor&, parallel::ReduceOp) override { refuse(); }
  std::unique_ptr<parallel::Work> reduce_scatter_async(const Tensor&, Tensor&,
                                                       parallel::ReduceOp) override {
    refuse();
  }
  void broadcast(Tensor&, int) override { refuse(); }
  void barrier() override { refuse(); }
  void all_to_all(const Tensor&, const std::vector<int64_t>&, Tensor&,
                  const std::vector<int64_t>&) override {
    refuse();
  }
  std::unique_ptr<parallel::Work> batch_isend_irecv(std::vector<parallel::P2POp>) override {
    refuse();
  }

 private:
  [[noreturn]] void refuse() const {
    throw Error(concat("layout-only communicator '", name_, "' cannot communicate"));
  }
  std::string name_;
  int rank_, size_;
};

}  // namespace

std::vector<std::string> hf_architectures() {
  return {"GPT2LMHeadModel",
          "LlamaForCausalLM",
          "MistralForCausalLM",
          "Qwen2ForCausalLM",
          "Qwen3ForCausalLM",
          "Phi3ForCausalLM",
          "SmolLM3ForCausalLM",
          "MixtralForCausalLM",
          "Qwen2MoeForCausalLM",
          "Qwen3MoeForCausalLM",
          kGptNeoX,
          kOlmo2,
          kGemma2,
          kGemma3,
          kDeepseekV3,
          kGptOss,
          "BertForPreTraining",
          "BertForMaskedLM"};
}

config::ModelConfig model_from_hf_config(const hf::ConfigJson& c) {
  // A multimodal Gemma 3's language model (hf_gemma3_multimodal.h).
  if (c.architecture() == kGemma3Multimodal) return model_from_hf_config(gemma3_text_config(c));
  const std::string arch = c.architecture();
  if (!is_hf_decoder(arch) && !is_hf_bert(arch) && !is_hf_neox(arch) && !is_hf_olmo2(arch) &&
      !is_hf_gemma(arch) && !is_hf_deepseek(arch) && !is_hf_gpt_oss(arch)) {
    std::string names;
    for (const auto& a : hf_architectures()) names += (names.empty() ? "" : ", ") + a;
    c.fail("architectures", concat("'", arch, "' is not one this build converts (", names, "; ",
                                   kGemma3Multimodal, "'s language model)"));
  }
  const config::ModelConfig m = is_hf_bert(arch)       ? bert_model_from_hf(c, arch)
                                : is_hf_neox(arch)     ? neox_model_from_hf(c)
                                : is_hf_olmo2(arch)    ? olmo2_model_from_hf(c)
                                : is_hf_gemma(arch)    ? gemma_model_from_hf(c, arch)
                                : is_hf_deepseek(arch) ? deepseek_model_from_hf(c)
                                : is_hf_gpt_oss(arch)  ? gpt_oss_model_from_hf(c)
                                                       : decoder_model_from_hf(c, arch);
  try {
    m.validate();
  } catch (const InputError& e) {
    throw InputError(concat(c.path(), ": the model it describes is invalid: ", e.what()));
  }
  return m;
}

std::string hf_architecture_for(const config::Recipe& r) {
  if (r.model.arch == config::Arch::BERT) return bert_architecture_for(r.data.bert_binary_head);
  if (is_neox_model(r.model)) return kGptNeoX;
  if (is_olmo2_model(r.model)) return kOlmo2;
  if (r.model.mla.enabled()) return kDeepseekV3;
  if (is_gpt_oss_model(r.model)) return kGptOss;
  if (const std::string gemma = gemma_architecture_for(r.model); !gemma.empty()) return gemma;
  return decoder_architecture_for(r.model);
}

bool hf_binary_head(const std::string& architecture) { return hf_bert_binary_head(architecture); }

nlohmann::ordered_json hf_config_for(const config::ModelConfig& m, const std::string& arch,
                                     const std::string& dtype, const nlohmann::json& original) {
  if (is_hf_bert(arch)) return bert_hf_config(m, arch, dtype, original);
  if (is_hf_neox(arch)) return neox_hf_config(m, dtype, original);
  if (is_hf_olmo2(arch)) return olmo2_hf_config(m, dtype, original);
  if (is_hf_gemma(arch)) return gemma_hf_config(m, arch, dtype, original);
  if (is_hf_deepseek(arch)) return deepseek_hf_config(m, dtype, original);
  if (is_hf_gpt_oss(arch)) return gpt_oss_hf_config(m, dtype, original);
  return decoder_hf_config(m, arch, dtype, original);
}

std::vector<hf::TensorMapping> hf_mappings(const std::string& arch, const config::ModelConfig& m,
                                           int64_t padded_vocab, const nlohmann::json& hf_config) {
  if (is_hf_bert(arch)) return bert_mappings(arch, m, padded_vocab);
  if (is_hf_neox(arch)) return neox_mappings(m, padded_vocab, "embed_out.weight");
  if (is_hf_olmo2(arch)) return olmo2_mappings(m, padded_vocab);
  if (is_hf_gemma(arch)) return gemma_mappings(m, arch, padded_vocab);
  if (is_hf_deepseek(arch)) return deepseek_mappings(m, padded_vocab, hf_config);
  if (is_hf_gpt_oss(arch)) return gpt_oss_mappings(m, padded_vocab);
  MT_INPUT_CHECK(!m.mla.enabled(), arch, " has no multi-latent attention (", kDeepseekV3, " does)");
  return decoder_mappings(arch, m, padded_vocab);
}

std::set<std::string> hf_ignored_tensors(const std::string& arch, const config::ModelConfig& m) {
  if (is_hf_bert(arch)) return bert_ignored_tensors(arch, m);
  if (is_hf_neox(arch)) return neox_ignored_tensors(m);
  if (is_hf_olmo2(arch)) return olmo2_ignored_tensors(m);
  if (is_hf_gemma(arch)) return gemma_ignored_tensors(m);
  if (is_hf_deepseek(arch)) return deepseek_ignored_tensors(m);
  if (is_hf_gpt_oss(arch)) return gpt_oss_ignored_tensors(m);
  return decoder_ignored_tensors(arch, m);
}

std::vector<hf::FusedExperts> hf_fused_experts(const std::string& arch,
                                               const config::ModelConfig& m) {
  if (is_hf_gpt_oss(arch)) return gpt_oss_fused_experts(m);
  return {};
}

std::string hf_alternative_name(const std::string& arch, const std::string& name) {
  // GPT-NeoX's head: embed_out in its released checkpoints, lm_head inside transformers 5.
  if (is_hf_neox(arch) && name == "embed_out.weight") return "lm_head.weight";
  return {};
}

NativeLayout native_layout(const config::Recipe& recipe, int64_t tp, int64_t pp, int64_t ep) {
  NativeLayout out;
  const int64_t vocab = recipe.model.vocab_size;
  MT_CHECK(vocab > 0, "native_layout needs model.vocab_size");
  for (int64_t p = 0; p < pp; ++p)
    for (int64_t e = 0; e < ep; ++e)
      for (int64_t t = 0; t < tp; ++t) {
        const int rank = static_cast<int>(t + tp * (e + ep * p));
        LayoutOnlyCommunicator tp_comm("tp", static_cast<int>(t), static_cast<int>(tp));
        LayoutOnlyCommunicator ep_comm("ep", static_cast<int>(e), static_cast<int>(ep));
        ParamStore store;
        const ModelChunks chunks =
            build_model_chunks(recipe, vocab, store, tp_comm, p, pp, {&ep_comm});
        out.padded_vocab = chunks.padded_vocab;
        for (const Parameter* param : store.params()) {
          // A tied head's copy on the last stage is the word embedding's: saved once.
          if (param->shared_copy) continue;
          out.shapes[param->name] = {param->global_shape.begin(), param->global_shape.end()};
          out.placement[param->name].pieces.push_back({rank, param->shard});
        }
        // Aux-loss-free balancing's expert bias: kept with the checkpoint (moe/expert_bias/
        // layers.L, whole on rank 0), not a parameter.
        if (chunks.moe)
          for (const auto& [layer, bias] : chunks.moe->all_expert_bias())
            out.shapes[concat("moe/expert_bias/layers.", layer)] = {
                static_cast<int64_t>(bias.size())};
      }
  return out;
}

void check_mappings(const std::vector<hf::TensorMapping>& mappings, const NativeLayout& layout,
                    const std::string& arch) {
  std::set<std::string> mapped;
  for (const hf::TensorMapping& m : mappings) {
    const auto it = layout.shapes.find(m.native);
    MT_CHECK(it != layout.shapes.end(), arch, " map names '", m.native,
             "', which the model does not have");
    MT_CHECK(it->second == m.native_shape, arch, " map gives '", m.native, "' the wrong shape");
    mapped.insert(m.native);
  }
  for (const auto& [name, shape] : layout.shapes)
    MT_CHECK(mapped.count(name), arch, " map has no source for the model's '", name, "'");
}

}  // namespace megatron::models
