#include "megatron/checkpoint/pieces.h"

namespace megatron::checkpoint {

TensorPiece param_piece(Parameter& p, const std::string& prefix) {
  MT_CHECK(p.weight.device() == Device::CPU && p.weight.dtype() == DType::F32,
           "checkpoint of parameter '", p.name, "': its weights are not fp32 on the CPU");
  TensorPiece piece;
  piece.name = prefix + p.name;
  piece.global_shape = p.global_shape;
  piece.local_shape = p.local_shape;
  piece.shard = p.shard;
  piece.data = piece.dest = p.weight.data<float>();
  return piece;
}

TensorPiece segment_piece(const optim::Segment& s, float* state, const std::string& prefix) {
  MT_CHECK(s.param != nullptr, "segment without a parameter");
  TensorPiece piece;
  piece.name = prefix + s.param->name;
  piece.global_shape = s.param->global_shape;
  piece.local_shape = s.param->local_shape;
  piece.shard = s.param->shard;
  piece.flat_begin = s.begin;
  piece.flat_end = s.end;
  piece.data = piece.dest = state + s.state_offset;
  return piece;
}

}  // namespace megatron::checkpoint
