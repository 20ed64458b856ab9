#include "megatron/checkpoint/pieces.h"

namespace megatron::checkpoint {

TensorPiece param_piece(const Parameter& p, const std::string& prefix, float* data) {
  TensorPiece piece;
  piece.name = prefix + p.name;
  piece.global_shape = p.global_shape;
  piece.local_shape = p.local_shape;
  piece.shard = p.shard;
  piece.data = piece.dest = data;
  return piece;
}

TensorPiece segment_piece(const optim::Segment& s, const std::string& prefix, float* data) {
  MT_CHECK(s.param != nullptr, "segment without a parameter");
  TensorPiece piece = param_piece(*s.param, prefix, data);
  piece.flat_begin = s.begin;
  piece.flat_end = s.end;
  return piece;
}

}  // namespace megatron::checkpoint
