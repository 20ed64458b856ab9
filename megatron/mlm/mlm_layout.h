#pragma once
// How Megatron-Core lays out a GPT model's tensors over tensor parallelism and names them under
// either layer spec: shared by the reader (mlm_tensors.h, which joins rank files' pieces) and
// the writer (mlm_writer.h, which cuts them), so the two cannot disagree.
#include <cstdint>
#include <string>
#include <vector>

namespace megatron::mlm {

// The layer-spec-independent name of a layer-relative key (`self_attention.linear_qkv.
// layer_norm_weight` -> `input_layernorm.weight`, `mlp.linear_fc1.layer_norm_bias` ->
// `pre_mlp_layernorm.bias`); others as they are.
std::string canonical_layer_key(const std::string& key);
// Transformer Engine's spelling: the norms fused into the linear layer after them (what
// torch_dist keys use for dense layers with either spec).
std::string te_layer_key(const std::string& key);

// The dimension a canonical tensor is split along over tensor parallelism: 0 for the column-
// parallel layers' rows (and the vocabulary), 1 for the row-parallel layers' columns, -1 for a
// replicated tensor, -2 when not known here.
int tp_split_dim(const std::string& name);
// SwiGLU's fc1 (weight or bias): each rank holds [gate_t | up_t].
bool gated_fc1(const std::string& name);
// The global row (along the split dimension) of rank t's local row r, of `local` rows each.
int64_t global_row(int64_t t, int64_t r, int64_t local, int64_t global_rows, bool gated);
// The global tensor (shape `global`) from each tensor rank's piece, split along `dim`.
std::vector<float> join_tp(const std::vector<std::vector<float>>& pieces,
                           const std::vector<int64_t>& global, int dim, bool gated);
// Tensor rank t's piece of a global tensor split along `dim` over tp ranks.
std::vector<float> tp_piece(const std::vector<float>& x, const std::vector<int64_t>& global,
                            int dim, int64_t t, int64_t tp, bool gated);

}  // namespace megatron::mlm
