#pragma once
// TensorPieces for the trainer's state: a Parameter's local shard (values), and a
// distributed-optimizer Segment of a per-element state buffer (Adam moments, ...). The piece's
// name is `prefix + parameter name` (e.g. "optimizer.exp_avg." + "layers.0.mlp.fc1.weight"),
// so every layout names the same global tensor the same way. Each piece serves both save
// (data) and load (dest).
#include <string>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/transformer/parameter.h"

namespace megatron::checkpoint {

// p.weight must be an fp32 CPU tensor (stage device or 16-bit weights through fp32 first).
TensorPiece param_piece(Parameter& p, const std::string& prefix = {});
// The segment's local elements [begin, end) of its parameter, stored at state + state_offset.
TensorPiece segment_piece(const optim::Segment& s, float* state, const std::string& prefix);

}  // namespace megatron::checkpoint
