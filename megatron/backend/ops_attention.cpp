// The ops' front end: attention (unfused and flash), rotary embeddings and dropout.
#include "megatron/backend/op_checks.h"

namespace megatron::ops {
using namespace impl;

void attention_forward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&probs, "probs"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && probs.numel() == s.B * s.H * s.S * s.S,
           "attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  device_call(dev, op)->attention_forward(s, opt, qkv, out, probs);
}

void attention_backward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv) {
  const char* op = "attention_backward";
  const Device dev =
      device_of(op, {{&qkv, "qkv"}, {&probs, "probs"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               probs.numel() == s.B * s.H * s.S * s.S,
           "attention_backward: buffer sizes");
  device_call(dev, op)->attention_backward(s, opt, qkv, probs, dout, dqkv);
}

void flash_attention_forward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                             const Tensor& qkv, Tensor& out, Tensor& lse) {
  const char* op = "flash_attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && lse.numel() == s.B * s.H * s.S,
           "flash_attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  device_call(dev, op)->flash_attention_forward(s, opt, qkv, out, lse);
}

void flash_attention_backward(const kernels::AttentionShape& s,
                              const kernels::AttentionOptions& opt, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& dout,
                              Tensor& dqkv) {
  const char* op = "flash_attention_backward";
  const Device dev = device_of(
      op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               out.numel() == dout.numel() && lse.numel() == s.B * s.H * s.S,
           "flash_attention_backward: buffer sizes");
  device_call(dev, op)->flash_attention_backward(s, opt, qkv, out, lse, dout, dqkv);
}

namespace {
void check_block_sizes(const char* op, const kernels::AttentionShape& s,
                       const kernels::AttentionBlock& b, const Tensor& q, const Tensor& kv,
                       const Tensor& out, const Tensor& lse) {
  const int64_t kv_width = b.kv_packed ? 2 * s.G : s.H + 2 * s.G;
  MT_CHECK(s.G > 0 && s.H % s.G == 0 && q.numel() == b.q_rows * s.B * (s.H + 2 * s.G) * s.Dh &&
               kv.numel() == b.k_rows * s.B * kv_width * s.Dh &&
               out.numel() == b.q_rows * s.B * s.H * s.Dh && lse.numel() == s.B * s.H * b.q_rows,
           op, ": buffer sizes do not match q_rows=", b.q_rows, " k_rows=", b.k_rows, " B=", s.B,
           " H=", s.H, " G=", s.G, " Dh=", s.Dh, " (q ", q.numel(), ", kv ", kv.numel(), ", out ",
           out.numel(), ", lse ", lse.numel(), ")");
}
}  // namespace

void flash_attention_block_forward(const kernels::AttentionShape& s,
                                   const kernels::AttentionOptions& opt,
                                   const kernels::AttentionBlock& b, const Tensor& q,
                                   const Tensor& kv, Tensor& out, Tensor& lse) {
  const char* op = "flash_attention_block_forward";
  const Device dev = device_of(op, {{&q, "q"}, {&kv, "kv"}, {&out, "out"}, {&lse, "lse"}});
  check_block_sizes(op, s, b, q, kv, out, lse);
  device_call(dev, op)->flash_attention_block_forward(s, opt, b, q, kv, out, lse);
}

void flash_attention_block_backward(const kernels::AttentionShape& s,
                                    const kernels::AttentionOptions& opt,
                                    const kernels::AttentionBlock& b, const Tensor& q,
                                    const Tensor& kv, const Tensor& out, const Tensor& lse,
                                    const Tensor& dout, Tensor& dq, Tensor& dkv) {
  const char* op = "flash_attention_block_backward";
  const Device dev = device_of(op, {{&q, "q"},
                                    {&kv, "kv"},
                                    {&out, "out"},
                                    {&lse, "lse"},
                                    {&dout, "dout"},
                                    {&dq, "dq"},
                                    {&dkv, "dkv"}});
  check_block_sizes(op, s, b, q, kv, out, lse);
  MT_CHECK(dout.numel() == out.numel() && dq.numel() == q.numel() && dkv.numel() == kv.numel(), op,
           ": gradient buffer sizes");
  device_call(dev, op)->flash_attention_block_backward(s, opt, b, q, kv, out, lse, dout, dq, dkv);
}

void flash_attention_merge(const Tensor& out, const Tensor& lse, Tensor& acc_out, Tensor& acc_lse,
                           int64_t acc_row) {
  const char* op = "flash_attention_merge";
  const Device dev =
      device_of(op, {{&out, "out"}, {&lse, "lse"}, {&acc_out, "acc_out"}, {&acc_lse, "acc_lse"}});
  MT_CHECK(out.ndim() == 4 && lse.ndim() == 3 && acc_lse.ndim() == 3 &&
               acc_out.numel() == out.numel() && lse.dim(2) == out.dim(0) &&
               lse.dim(0) * lse.dim(1) == acc_lse.dim(0) * acc_lse.dim(1) && acc_row >= 0 &&
               acc_row + out.dim(0) <= acc_lse.dim(2),
           op, ": out ", out.shape().str(), ", lse ", lse.shape().str(), ", acc_lse ",
           acc_lse.shape().str(), " rows from ", acc_row);
  device_call(dev, op)->flash_attention_merge(out, lse, acc_out, acc_lse, acc_row);
}

void kv_cache_attention(const kernels::AttentionShape& s, float scale, const Tensor& qkv,
                        Tensor& keys, Tensor& values, int64_t past, Tensor& out, int64_t window,
                        float softcap, const Tensor* sinks) {
  const char* op = "kv_cache_attention";
  const Device dev =
      device_of(op, {{&qkv, "qkv"}, {&keys, "keys"}, {&values, "values"}, {&out, "out"}});
  check_attention_shape(s, qkv, op);
  const int64_t capacity = keys.dim(2);
  MT_CHECK(keys.shape() == values.shape() && keys.ndim() == 4 && keys.dim(0) == s.B &&
               keys.dim(1) == s.G && keys.dim(3) == s.Dh,
           "kv_cache_attention: caches ", keys.shape().str(), " for B ", s.B, " G ", s.G, " Dh ",
           s.Dh);
  MT_CHECK(past >= 0 && past + s.S <= capacity, "kv_cache_attention: positions ", past, "..",
           past + s.S, " past the cache capacity ", capacity);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh, "kv_cache_attention: out ", out.shape().str());
  if (sinks != nullptr)
    MT_CHECK(sinks->dtype() == DType::F32 && sinks->numel() == s.H && sinks->device() == dev,
             "kv_cache_attention: sinks must be F32 [", s.H, "] on the qkv's device");
  device_call(dev, op)->kv_cache_attention(s, scale, qkv, keys, values, past, out, window, softcap,
                                           sinks);
}

namespace {
void check_sinks(const char* op, const kernels::AttentionShape& s, Device dev, const Tensor& sinks,
                 const Tensor& lse) {
  MT_CHECK(sinks.dtype() == DType::F32 && sinks.numel() == s.H && sinks.device() == dev, op,
           ": sinks must be F32 [", s.H, "] on the output's device, got ",
           dtype_name(sinks.dtype()), " ", sinks.shape().str());
  MT_CHECK(lse.dtype() == DType::F32 && lse.numel() == s.B * s.H * s.S && lse.device() == dev, op,
           ": lse must be F32 [", s.B, ", ", s.H, ", ", s.S, "], got ", dtype_name(lse.dtype()),
           " ", lse.shape().str());
}
}  // namespace

void attention_sinks_forward(const kernels::AttentionShape& s, const Tensor& sinks,
                             const Tensor& lse, Tensor& out) {
  const char* op = "attention_sinks_forward";
  const Device dev = device_of(op, {{&out, "out"}});
  check_sinks(op, s, dev, sinks, lse);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh, op, ": out ", out.shape().str());
  device_call(dev, op)->attention_sinks_forward(s, sinks, lse, out);
}

void attention_sinks_backward(const kernels::AttentionShape& s, const Tensor& sinks,
                              const Tensor& lse, const Tensor& out, const Tensor& dout,
                              Tensor& dout_scaled, Tensor* dsinks) {
  const char* op = "attention_sinks_backward";
  const Device dev = device_of(op, {{&out, "out"}, {&dout, "dout"}, {&dout_scaled, "dout_scaled"}});
  check_sinks(op, s, dev, sinks, lse);
  MT_CHECK(out.shape() == dout.shape() && dout.shape() == dout_scaled.shape() &&
               out.numel() == s.S * s.B * s.H * s.Dh,
           op, ": out ", out.shape().str(), ", dout ", dout.shape().str(), ", dout_scaled ",
           dout_scaled.shape().str());
  if (dsinks != nullptr)
    MT_CHECK(dsinks->dtype() == DType::F32 && dsinks->numel() == s.H && dsinks->device() == dev, op,
             ": dsinks must be F32 [", s.H, "]");
  device_call(dev, op)->attention_sinks_backward(s, sinks, lse, out, dout, dout_scaled, dsinks);
}

namespace {
// Checks the per-token positions of a rope call: int32 [S, B] on the qkv's device, or null.
void check_rope_positions(const char* op, const kernels::AttentionShape& s, Device dev,
                          const Tensor* positions) {
  if (positions == nullptr) return;
  MT_CHECK(positions->dtype() == DType::I32 && positions->numel() == s.S * s.B &&
               positions->device() == dev,
           op, ": positions must be int32 [S, B] = [", s.S, ", ", s.B,
           "] on the qkv's device, got ", dtype_name(positions->dtype()), " ",
           positions->shape().str());
}
}  // namespace

void rope_forward(const kernels::AttentionShape& s, Tensor& qkv, const math::RopeFrequencies& rope,
                  int64_t offset, const Tensor* positions) {
  const char* op = "rope_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}});
  check_attention_shape(s, qkv, op);
  check_rope_positions(op, s, dev, positions);
  device_call(dev, op)->rope_forward(s, qkv, rope, offset, positions);
}

void rope_backward(const kernels::AttentionShape& s, Tensor& dqkv,
                   const math::RopeFrequencies& rope, int64_t offset, const Tensor* positions) {
  const char* op = "rope_backward";
  const Device dev = device_of(op, {{&dqkv, "dqkv"}});
  check_attention_shape(s, dqkv, op);
  check_rope_positions(op, s, dev, positions);
  device_call(dev, op)->rope_backward(s, dqkv, rope, offset, positions);
}

void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  const char* op = "dropout_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "dropout_forward: shape mismatch");
  device_call(dev, op)->dropout_forward(x, y, p, seed, stream, index_offset);
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset) {
  const char* op = "dropout_backward";
  const Device dev = device_of(op, {{&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dx.numel() == dy.numel(), "dropout_backward: shape mismatch");
  device_call(dev, op)->dropout_backward(dy, dx, p, seed, stream, index_offset);
}

void dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                  uint64_t seed, uint64_t stream) {
  const char* op = "dropout_rows";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(rows.S >= 0 && rows.B > 0 && rows.D > 0 && x.numel() == rows.S * rows.B * rows.D &&
               y.numel() == x.numel(),
           "dropout_rows: tensors ", x.shape().str(), " / ", y.shape().str(), " are not [", rows.S,
           ", ", rows.B, ", ", rows.D, "]");
  MT_CHECK(
      rows.batch_offset >= 0 && rows.seq_offset >= 0 && rows.seq_offset + rows.S <= rows.seq_total,
      "dropout_rows: rows [", rows.seq_offset, ", ", rows.seq_offset + rows.S,
      ") outside a sequence of ", rows.seq_total);
  device_call(dev, op)->dropout_rows(x, y, rows, p, seed, stream);
}

}  // namespace megatron::ops
