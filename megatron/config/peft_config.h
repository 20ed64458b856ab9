#pragma once
// peft: parameter-efficient fine-tuning (Megatron-Bridge's LoRA config names). With type lora
// every weight of the model is frozen (no gradient, fp32 master or optimizer state) and each
// projection named in target_modules gets trainable low-rank adapters
// (megatron/transformer/lora.h): y = W x + (alpha / dim) B A x.
//   type            none | lora
//   dim             the adapters' rank r
//   alpha           scale numerator (the update is scaled by alpha / dim)
//   dropout         dropout on the adapters' input, in [0, 1)
//   target_modules  any of linear_qkv, linear_proj, linear_fc1, linear_fc2
#include <cstdint>
#include <string>
#include <vector>

#include "megatron/config/key_info.h"

namespace megatron::config {

struct KeyOrigins;

struct PeftConfig {
  std::string type = "none";
  int64_t dim = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> target_modules = {"linear_qkv", "linear_proj", "linear_fc1",
                                             "linear_fc2"};
  bool lora() const { return type == "lora"; }
  bool targets(const std::string& module) const {
    for (const auto& m : target_modules)
      if (m == module) return true;
    return false;
  }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const PeftConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("type", s.type, noted(s.type == "none" ? "full fine-tuning" : ""));
    v("dim", s.dim);
    v("alpha", s.alpha);
    v("dropout", s.dropout);
    v("target_modules", s.target_modules);
  }
};

}  // namespace megatron::config
