#pragma once
// TensorPieces for the trainer's state: a Parameter's local shard (weights, master weights),
// and a distributed-optimizer Segment of a per-element state buffer (Adam moments, ...). The
// piece's name is `prefix + parameter name` (e.g. "optim/exp_avg/" + "layers.0.mlp.fc1.weight"),
// so every layout names the same global tensor the same way. Each piece serves both save
// (data) and load (dest): both point at `data`, fp32 host memory of the piece's elements.
#include <cstdint>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/params/parameter.h"

namespace megatron::training {

// The whole local shard of p, its local_shape elements at data.
checkpoint::TensorPiece param_piece(const Parameter& p, const std::string& prefix, float* data);
// The segment's local elements [begin, end) of its parameter, the first of them at data.
checkpoint::TensorPiece segment_piece(const optim::Segment& s, const std::string& prefix,
                                      float* data);

// The vocabulary is padded to a multiple of make_vocab_size_divisible_by * tp, so the embedding
// and output tables of another tensor-parallel size differ in their padding rows only: such a
// piece is re-expressed (appended to out) as a row range of the saved (unsharded) tensor of
// saved_shape; false when the shapes differ otherwise.
bool remap_padded_rows(checkpoint::TensorPiece& piece, const std::vector<int64_t>& saved_shape,
                       std::vector<checkpoint::TensorPiece>& out);
// Aux-loss-free balancing's expert bias of one layer ([num_experts], the same on every rank).
checkpoint::TensorPiece expert_bias_piece(int64_t layer, std::vector<float>& bias);
// A top-k error-feedback residual (parallel.grad_compression) named `key`.
checkpoint::TensorPiece residual_piece(const std::string& key, Tensor& residual);

}  // namespace megatron::training
