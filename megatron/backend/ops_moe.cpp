// The ops' front end: the mixture-of-experts row movement and gated sums.
#include "megatron/backend/op_checks.h"

namespace megatron::ops {
using namespace impl;

namespace {

// Rows of `t` for a row length taken from its last dimension (so [0, D] has zero rows).
int64_t row_len(const char* op, const Tensor& t, const char* name) {
  MT_CHECK(t.ndim() >= 1 && last_dim(t) > 0, op, ": ", name, " ", t.shape().str(),
           " needs a last dimension of at least one element (the row length)");
  return last_dim(t);
}

}  // namespace

void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  const char* op = "gather_rows";
  const Device dev = device_of(op, {{&src, "src"}, {&index, "index"}, {&out, "out"}});
  require_i32(op, index, "index");
  const int64_t D = row_len(op, src, "src"), m = index.numel();
  rows_of(src, D);  // src is whole rows
  MT_CHECK(out.numel() == m * D && out.dtype() == src.dtype(), op, ": out ",
           dtype_name(out.dtype()), out.shape().str(), " for ", m, " rows of ",
           dtype_name(src.dtype()), src.shape().str());
  device_call(dev, op)->gather_rows(src, index, out);
}

void scatter_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  const char* op = "scatter_rows";
  const Device dev = device_of(op, {{&src, "src"}, {&index, "index"}, {&out, "out"}});
  require_i32(op, index, "index");
  const int64_t D = row_len(op, out, "out"), m = index.numel();
  rows_of(out, D);  // out is whole rows
  MT_CHECK(src.numel() == m * D && out.dtype() == src.dtype(), op, ": src ",
           dtype_name(src.dtype()), src.shape().str(), " for ", m, " rows of ",
           dtype_name(out.dtype()), out.shape().str());
  device_call(dev, op)->scatter_rows(src, index, out);
}

void moe_combine(const Tensor& rows, const Tensor* index, const Tensor* gates, int64_t topk,
                 Tensor& out) {
  const char* op = "moe_combine";
  const Device dev =
      device_of(op, {{&rows, "rows"}, {index, "index"}, {gates, "gates"}, {&out, "out"}});
  if (index) require_i32(op, *index, "index");
  MT_CHECK(topk >= 1, op, ": topk ", topk);
  const int64_t D = row_len(op, out, "out"), T = rows_of(out, D), R = rows_of(rows, D);
  MT_CHECK(index ? index->numel() == T * topk : R == T * topk, op, ": ", R, " rows",
           index ? concat(" and ", index->numel(), " indices") : std::string(), " for ", T,
           " tokens x ", topk, " slots");
  if (gates)
    MT_CHECK(gates->numel() == T * topk, op, ": gates ", gates->shape().str(), " for ", T,
             " tokens x ", topk, " slots");
  device_call(dev, op)->moe_combine(rows, index, gates, topk, out);
}

void moe_combine_backward(const Tensor& rows, const Tensor& gates, const Tensor& dy, int64_t topk,
                          Tensor& d_rows, Tensor& d_gates) {
  const char* op = "moe_combine_backward";
  const Device dev = device_of(op, {{&rows, "rows"},
                                    {&gates, "gates"},
                                    {&dy, "dy"},
                                    {&d_rows, "d_rows"},
                                    {&d_gates, "d_gates"}});
  MT_CHECK(topk >= 1, op, ": topk ", topk);
  const int64_t D = row_len(op, dy, "dy"), T = rows_of(dy, D);
  MT_CHECK(rows.numel() == T * topk * D && d_rows.numel() == rows.numel() &&
               gates.numel() == T * topk && d_gates.numel() == T * topk,
           op, ": rows ", rows.shape().str(), ", d_rows ", d_rows.shape().str(), ", gates ",
           gates.shape().str(), ", d_gates ", d_gates.shape().str(), " for dy ", dy.shape().str(),
           " and topk ", topk);
  device_call(dev, op)->moe_combine_backward(rows, gates, dy, topk, d_rows, d_gates);
}

}  // namespace megatron::ops
