// CPU backend: attention (unfused and flash), rotary embeddings and dropout.
#include "megatron/backend/cpu_ops.h"
#include "megatron/backend/op_impl.h"

namespace megatron::ops {
using namespace impl;

void CpuOps::attention_forward(const kernels::AttentionShape& s,
                               const kernels::AttentionOptions& opt, const Tensor& qkv, Tensor& out,
                               Tensor& probs) const {
  const char* op = "attention_forward";
  const FloatArgs fa(
      op,
      {{&qkv, "qkv"}, {&out, "out", Role::T, kWritten}, {&probs, "probs", Role::F32, kWritten}});
  Fp32OnCpu f(fa);
  cpu::attention_forward(s, opt, f.in(qkv), f.out(out), f.out(probs));
  f.finish();
}

void CpuOps::attention_backward(const kernels::AttentionShape& s,
                                const kernels::AttentionOptions& opt, const Tensor& qkv,
                                const Tensor& probs, const Tensor& dout, Tensor& dqkv) const {
  const char* op = "attention_backward";
  const FloatArgs fa(op, {{&qkv, "qkv"},
                          {&probs, "probs", Role::F32},
                          {&dout, "dout"},
                          {&dqkv, "dqkv", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::attention_backward(s, opt, f.in(qkv), f.in(probs), f.in(dout), f.out(dqkv));
  f.finish();
}

void CpuOps::flash_attention_forward(const kernels::AttentionShape& s,
                                     const kernels::AttentionOptions& opt, const Tensor& qkv,
                                     Tensor& out, Tensor& lse) const {
  const char* op = "flash_attention_forward";
  const FloatArgs fa(
      op, {{&qkv, "qkv"}, {&out, "out", Role::T, kWritten}, {&lse, "lse", Role::F32, kWritten}});
  Fp32OnCpu f(fa);
  cpu::flash_attention_forward(s, opt, f.in(qkv), f.out(out), f.out(lse));
  f.finish();
}

void CpuOps::flash_attention_backward(const kernels::AttentionShape& s,
                                      const kernels::AttentionOptions& opt, const Tensor& qkv,
                                      const Tensor& out, const Tensor& lse, const Tensor& dout,
                                      Tensor& dqkv) const {
  const char* op = "flash_attention_backward";
  const FloatArgs fa(op, {{&qkv, "qkv"},
                          {&out, "out"},
                          {&lse, "lse", Role::F32},
                          {&dout, "dout"},
                          {&dqkv, "dqkv", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::flash_attention_backward(s, opt, f.in(qkv), f.in(out), f.in(lse), f.in(dout), f.out(dqkv));
  f.finish();
}

namespace {
void require_f32(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> ts) {
  for (const auto& [t, name] : ts)
    MT_INPUT_CHECK(t->dtype() == DType::F32, op, ": ", name, " must be fp32 (got ",
                   dtype_name(t->dtype()), ")");
}
}  // namespace

void CpuOps::flash_attention_block_forward(const kernels::AttentionShape& s,
                                           const kernels::AttentionOptions& opt,
                                           const kernels::AttentionBlock& b, const Tensor& q,
                                           const Tensor& kv, Tensor& out, Tensor& lse) const {
  require_f32("flash_attention_block_forward",
              {{&q, "q"}, {&kv, "kv"}, {&out, "out"}, {&lse, "lse"}});
  cpu::flash_attention_block_forward(s, opt, b, q.data<float>(), kv.data<float>(),
                                     out.data<float>(), lse.data<float>());
}

void CpuOps::flash_attention_block_backward(const kernels::AttentionShape& s,
                                            const kernels::AttentionOptions& opt,
                                            const kernels::AttentionBlock& b, const Tensor& q,
                                            const Tensor& kv, const Tensor& out, const Tensor& lse,
                                            const Tensor& dout, Tensor& dq, Tensor& dkv) const {
  require_f32("flash_attention_block_backward", {{&q, "q"},
                                                 {&kv, "kv"},
                                                 {&out, "out"},
                                                 {&lse, "lse"},
                                                 {&dout, "dout"},
                                                 {&dq, "dq"},
                                                 {&dkv, "dkv"}});
  cpu::flash_attention_block_backward(s, opt, b, q.data<float>(), kv.data<float>(),
                                      out.data<float>(), lse.data<float>(), dout.data<float>(),
                                      dq.data<float>(), dkv.data<float>());
}

void CpuOps::flash_attention_merge(const Tensor& out, const Tensor& lse, Tensor& acc_out,
                                   Tensor& acc_lse, int64_t acc_row) const {
  require_f32("flash_attention_merge",
              {{&out, "out"}, {&lse, "lse"}, {&acc_out, "acc_out"}, {&acc_lse, "acc_lse"}});
  cpu::flash_attention_merge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), out.data<float>(),
                             lse.data<float>(), acc_out.data<float>(),
                             acc_lse.data<float>() + acc_row, acc_lse.dim(2));
}

void CpuOps::kv_cache_attention(const kernels::AttentionShape& s, float scale, const Tensor& qkv,
                                Tensor& keys, Tensor& values, int64_t past, Tensor& out,
                                int64_t window, float softcap, const Tensor* sinks) const {
  // The CPU kernel is fp32 only; CUDA takes fp32, bf16 or fp16 (one dtype for all four).
  for (const Tensor* t : std::initializer_list<const Tensor*>{&qkv, &keys, &values, &out})
    MT_INPUT_CHECK(t->dtype() == DType::F32, "KV-cache decoding on the CPU runs in fp32 (got a ",
                   dtype_name(t->dtype()), " tensor; on cuda fp32, bf16 and fp16 run)");
  const int64_t capacity = keys.dim(2);
  cpu::kv_cache_attention(s, scale, qkv.data<float>(), keys.data<float>(), values.data<float>(),
                          past, capacity, out.data<float>(), window, softcap,
                          sinks != nullptr ? sinks->data<float>() : nullptr);
}

void CpuOps::attention_sinks_forward(const kernels::AttentionShape& s, const Tensor& sinks,
                                     const Tensor& lse, Tensor& out) const {
  const char* op = "attention_sinks_forward";
  const FloatArgs fa(
      op,
      {{&sinks, "sinks", Role::F32}, {&lse, "lse", Role::F32}, {&out, "out", Role::T, kUpdated}});
  Fp32OnCpu f(fa);
  cpu::attention_sinks_forward(s, f.in(sinks), f.in(lse), f.out(out));
  f.finish();
}

void CpuOps::attention_sinks_backward(const kernels::AttentionShape& s, const Tensor& sinks,
                                      const Tensor& lse, const Tensor& out, const Tensor& dout,
                                      Tensor& dout_scaled, Tensor* dsinks) const {
  const char* op = "attention_sinks_backward";
  const FloatArgs fa(op, {{&sinks, "sinks", Role::F32},
                          {&lse, "lse", Role::F32},
                          {&out, "out"},
                          {&dout, "dout"},
                          {&dout_scaled, "dout_scaled", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  float* ds = nullptr;
  if (dsinks != nullptr) {
    MT_CHECK(dsinks->dtype() == DType::F32, op, ": dsinks must be F32");
    ds = dsinks->data<float>();
  }
  cpu::attention_sinks_backward(s, f.in(sinks), f.in(lse), f.in(out), f.in(dout),
                                f.out(dout_scaled), ds);
  f.finish();
}

void CpuOps::rope_forward(const kernels::AttentionShape& s, Tensor& qkv,
                          const math::RopeFrequencies& rope, int64_t offset,
                          const Tensor* positions) const {
  const char* op = "rope_forward";
  const int32_t* pos = positions != nullptr ? positions->data<int32_t>() : nullptr;
  const FloatArgs fa(op, {{&qkv, "qkv", Role::T, kUpdated}});
  Fp32OnCpu f(fa);
  cpu::rope_forward(s, f.out(qkv), rope, offset, pos);
  f.finish();
}

void CpuOps::rope_backward(const kernels::AttentionShape& s, Tensor& dqkv,
                           const math::RopeFrequencies& rope, int64_t offset,
                           const Tensor* positions) const {
  const char* op = "rope_backward";
  const int32_t* pos = positions != nullptr ? positions->data<int32_t>() : nullptr;
  const FloatArgs fa(op, {{&dqkv, "dqkv", Role::T, kUpdated}});
  Fp32OnCpu f(fa);
  cpu::rope_backward(s, f.out(dqkv), rope, offset, pos);
  f.finish();
}

void CpuOps::dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                             uint64_t index_offset) const {
  const char* op = "dropout_forward";
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::dropout_forward(f.in(x), f.out(y), x.numel(), p, seed, stream, index_offset);
  f.finish();
}

void CpuOps::dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                              uint64_t index_offset) const {
  const char* op = "dropout_backward";
  const FloatArgs fa(op, {{&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::dropout_backward(f.in(dy), f.out(dx), dy.numel(), p, seed, stream, index_offset);
  f.finish();
}

void CpuOps::dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                          uint64_t seed, uint64_t stream) const {
  const char* op = "dropout_rows";
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::dropout_rows(f.in(x), f.out(y), rows, p, seed, stream);
  f.finish();
}

}  // namespace megatron::ops
