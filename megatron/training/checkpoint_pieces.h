#pragma once
// TensorPieces for the trainer's state: a Parameter's local shard (weights, master weights),
// and a distributed-optimizer Segment of a per-element state buffer (Adam moments, ...). The
// piece's name is `prefix + parameter name` (e.g. "optim/exp_avg/" + "layers.0.mlp.fc1.weight"),
// so every layout names the same global tensor the same way. Each piece serves both save
// (data) and load (dest): both point at `data`, fp32 host memory of the piece's elements.
#include <string>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/params/parameter.h"

namespace megatron::training {

// The whole local shard of p, its local_shape elements at data.
checkpoint::TensorPiece param_piece(const Parameter& p, const std::string& prefix, float* data);
// The segment's local elements [begin, end) of its parameter, the first of them at data.
checkpoint::TensorPiece segment_piece(const optim::Segment& s, const std::string& prefix,
                                      float* data);

}  // namespace megatron::training
