#include "megatron/training/checkpoint_pieces.h"

namespace megatron::training {

checkpoint::TensorPiece param_piece(const Parameter& p, const std::string& prefix, float* data) {
  checkpoint::TensorPiece piece;
  piece.name = prefix + p.name;
  piece.global_shape = p.global_shape;
  piece.local_shape = p.local_shape;
  piece.shard = p.shard;
  piece.data = piece.dest = data;
  return piece;
}

checkpoint::TensorPiece segment_piece(const optim::Segment& s, const std::string& prefix,
                                      float* data) {
  MT_CHECK(s.param != nullptr, "segment without a parameter");
  checkpoint::TensorPiece piece = param_piece(*s.param, prefix, data);
  piece.flat_begin = s.begin;
  piece.flat_end = s.end;
  return piece;
}

}  // namespace megatron::training
