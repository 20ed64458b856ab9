#include "megatron/mlm/mlm_layout.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace megatron::mlm {
namespace {

std::string replace_prefix(const std::string& key,
                           const std::vector<std::pair<std::string, std::string>>& pairs) {
  for (const auto& [from, to] : pairs)
    if (key.rfind(from, 0) == 0) return to + key.substr(from.size());
  return key;
}

}  // namespace

std::string canonical_layer_key(const std::string& key) {
  return replace_prefix(key, {{"self_attention.linear_qkv.layer_norm_", "input_layernorm."},
                              {"mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm."}});
}

std::string te_layer_key(const std::string& key) {
  return replace_prefix(key, {{"input_layernorm.", "self_attention.linear_qkv.layer_norm_"},
                              {"pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"}});
}

int tp_split_dim(const std::string& name) {
  static const std::vector<std::string> rows = {"self_attention.linear_qkv.weight",
                                                "self_attention.linear_qkv.bias",
                                                "mlp.linear_fc1.weight",
                                                "mlp.linear_fc1.bias",
                                                "embedding.word_embeddings.weight",
                                                "output_layer.weight"};
  static const std::vector<std::string> columns = {"self_attention.linear_proj.weight",
                                                   "mlp.linear_fc2.weight"};
  static const std::vector<std::string> replicated = {"input_layernorm.weight",
                                                      "input_layernorm.bias",
                                                      "pre_mlp_layernorm.weight",
                                                      "pre_mlp_layernorm.bias",
                                                      "self_attention.linear_proj.bias",
                                                      "mlp.linear_fc2.bias",
                                                      "self_attention.q_layernorm.weight",
                                                      "self_attention.k_layernorm.weight",
                                                      "decoder.final_layernorm.weight",
                                                      "decoder.final_layernorm.bias",
                                                      "embedding.position_embeddings.weight"};
  for (const auto& s : rows)
    if (name.ends_with(s)) return 0;
  for (const auto& s : columns)
    if (name.ends_with(s)) return 1;
  for (const auto& s : replicated)
    if (name.ends_with(s)) return -1;
  return -2;
}

bool gated_fc1(const std::string& name) {
  return name.ends_with(".linear_fc1.weight") || name.ends_with(".linear_fc1.bias");
}

int64_t global_row(int64_t t, int64_t r, int64_t local, int64_t global_rows, bool gated) {
  if (!gated) return t * local + r;
  const int64_t half = local / 2;
  return r < half ? t * half + r : global_rows / 2 + t * half + (r - half);
}

namespace {

// rows x inner blocks around the split dimension d.
void split_extent(const std::vector<int64_t>& shape, size_t d, int64_t& outer, int64_t& inner) {
  outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= shape[i];
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
}

}  // namespace

std::vector<float> join_tp(const std::vector<std::vector<float>>& pieces,
                           const std::vector<int64_t>& global, int dim, bool gated) {
  if (dim < 0) return pieces.front();
  const auto d = static_cast<size_t>(dim);
  int64_t outer = 0, inner = 0;
  split_extent(global, d, outer, inner);
  const auto parts = static_cast<int64_t>(pieces.size());
  const int64_t local = global[d] / parts;
  std::vector<float> out(static_cast<size_t>(outer * global[d] * inner));
  for (int64_t t = 0; t < parts; ++t) {
    const std::vector<float>& piece = pieces[static_cast<size_t>(t)];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < local; ++r)
        std::copy_n(
            piece.begin() + (o * local + r) * inner, inner,
            out.begin() + (o * global[d] + global_row(t, r, local, global[d], gated)) * inner);
  }
  return out;
}

std::vector<float> tp_piece(const std::vector<float>& x, const std::vector<int64_t>& global,
                            int dim, int64_t t, int64_t tp, bool gated) {
  if (dim < 0) return x;
  const auto d = static_cast<size_t>(dim);
  int64_t outer = 0, inner = 0;
  split_extent(global, d, outer, inner);
  const int64_t local = global[d] / tp;
  std::vector<float> out(static_cast<size_t>(outer * local * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < local; ++r)
      std::copy_n(x.begin() + (o * global[d] + global_row(t, r, local, global[d], gated)) * inner,
                  inner, out.begin() + (o * local + r) * inner);
  return out;
}

}  // namespace megatron::mlm
