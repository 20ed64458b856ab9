#include "megatron/training/checkpoint_pieces.h"

#include <algorithm>

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

// The vocabulary is padded to a multiple of make_vocab_size_divisible_by * tp, so the
// embedding and output tables of another tensor-parallel size differ in their padding rows
// only. Such a piece is re-expressed as a row range of the saved (unsharded) tensor; padding
// rows beyond the saved table keep their initial values (they never influence the model).
bool remap_padded_rows(checkpoint::TensorPiece& piece, const std::vector<int64_t>& saved_shape,
                       std::vector<checkpoint::TensorPiece>& out) {
  const Shape& want = piece.global_shape;
  if (static_cast<int>(saved_shape.size()) != want.ndim() || want.ndim() < 1) return false;
  for (int d = 1; d < want.ndim(); ++d)
    if (saved_shape[static_cast<size_t>(d)] != want[d]) return false;
  if (!(piece.shard.dim <= 0)) return false;
  const int64_t row = want.numel() / std::max<int64_t>(want[0], 1);
  const int64_t local_rows = piece.local_shape[0];
  const int64_t first_row = piece.shard.replicated() ? 0 : piece.shard.index * local_rows;
  const int64_t end = piece.flat_end < 0 ? local_rows * row : piece.flat_end;
  // Global flat range of this piece in the wanted tensor, clipped to the saved rows.
  const int64_t g0 = first_row * row + piece.flat_begin, g1 = first_row * row + end;
  const int64_t lim = std::min(saved_shape[0], want[0]) * row;
  if (std::min(g1, lim) <= g0) return true;  // only padding rows: nothing to load
  checkpoint::TensorPiece p = piece;
  p.global_shape = Shape(saved_shape.begin(), saved_shape.end());
  p.local_shape = p.global_shape;
  p.shard = {};
  p.flat_begin = g0;
  p.flat_end = std::min(g1, lim);
  out.push_back(p);
  return true;
}

// Aux-loss-free balancing's expert bias of one layer ([num_experts], the same on every rank).
checkpoint::TensorPiece expert_bias_piece(int64_t layer, std::vector<float>& bias) {
  checkpoint::TensorPiece piece;
  piece.name = "moe/expert_bias/layers." + std::to_string(layer);
  piece.global_shape = piece.local_shape = Shape{static_cast<int64_t>(bias.size())};
  piece.data = piece.dest = bias.data();
  return piece;
}

// A top-k error-feedback residual (parallel.grad_compression), this rank's own: its name says
// the layout and world rank, so only a resume on the same layout finds it.
checkpoint::TensorPiece residual_piece(const std::string& key, Tensor& residual) {
  checkpoint::TensorPiece piece;
  piece.name = key;
  piece.global_shape = piece.local_shape = residual.shape();
  piece.data = piece.dest = residual.data<float>();
  return piece;
}

}  // namespace megatron::training
