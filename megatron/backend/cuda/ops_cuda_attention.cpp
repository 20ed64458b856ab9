// The CUDA backend's attention ops: unfused (cuBLASLt), fused (cuDNN's SDPA where it runs, else
// our own flash kernels; soft-capped scores through the block kernels), the query/key norms (per
// head and over the whole projection), KV-cache decoding, and the context-parallel block ops.
#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sinks.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_block.h"
#include "kernels/cuda/kv_attention.h"
#include "kernels/cuda/qk_norm.h"
#include "kernels/cuda/qk_projection.h"
#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/cudnn_attention.h"
#include "megatron/backend/cuda/ops_cuda.h"
#include "megatron/backend/cuda/ops_cuda_util.h"
#include "megatron/backend/cuda/runtime.h"

namespace megatron::ops::cuda_backend {
namespace kc = kernels::cuda;
namespace mc = megatron::cuda;

namespace {

using detail::expect;
using detail::expect_all;
using detail::ptr;
using detail::stream;
using detail::with_weight_type;
using detail::workspace;
using kc::with_storage_type;

// Whether fused attention runs on cuDNN (opt.cudnn: model.attention_backend); `fused` refuses
// what cuDNN cannot run instead of falling back to our own kernels.
bool runs_on_cudnn(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                   DType dtype) {
  if (opt.cudnn == kernels::CudnnUse::Never) return false;
  const mc::CudnnAttentionSupport support = mc::cudnn_attention_support(s, opt, dtype);
  MT_INPUT_CHECK(support.supported || opt.cudnn != kernels::CudnnUse::Always,
                 "model.attention_backend: fused: cuDNN's fused attention cannot run this layer "
                 "(S=",
                 s.S, " B=", s.B, " heads=", s.H, " groups=", s.G, " head dim=", s.Dh,
                 "): ", support.reason, "; use auto or flash");
  return support.supported;
}

void require_device_pointer(const void* p, const char* op, const char* what) {
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, p);
  if (status != cudaSuccess) cudaGetLastError();  // clear it; reported below
  MT_CHECK(status == cudaSuccess &&
               (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
           op, ": ", what,
           " must point to GPU memory when the tensors are on cuda (copy it over, e.g. with "
           "Tensor::to(Device::CUDA))");
}
}  // namespace

// Soft-capped attention scores (Gemma 2) run in our own flash kernels (kernels/cuda/
// flash_attention.h); cuDNN and the unfused path have no soft-capping.
constexpr const char* kNoUnfusedSoftcap =
    "model.attn_logit_softcapping runs the flash kernels (model.attention_backend auto or flash), "
    "not unfused attention";
namespace {
// Whether fused attention runs on cuDNN: never for soft-capped scores (refused under `fused`).
bool fused_on_cudnn(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                    DType dtype) {
  if (opt.softcap == 0.0f) return runs_on_cudnn(s, opt, dtype);
  MT_INPUT_CHECK(opt.cudnn != kernels::CudnnUse::Always,
                 "model.attention_backend: fused: cuDNN's fused attention has no soft-capping "
                 "(model.attn_logit_softcapping); use auto or flash");
  return false;
}
}  // namespace

void CudaOps::attention_forward(const kernels::AttentionShape& s,
                                const kernels::AttentionOptions& opt, const Tensor& qkv,
                                Tensor& out, Tensor& probs) const {
  MT_INPUT_CHECK(opt.softcap == 0.0f, kNoUnfusedSoftcap);
  const char* op = "attention_forward";
  expect(op, probs, "probs", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(qkv.dtype(), op, "qkv", [&]<typename T>() {
    expect_all<T>(op, {{&out, "out"}});
    mc::DeviceMemory ws = workspace(kc::attention_forward_workspace_bytes(s, sizeof(T)));
    kc::attention_forward<T>(mc::gemm_context(), s, opt, ptr<T>(qkv), ptr<T>(out),
                             ptr<float>(probs), ws.get(), stream());
  });
}

void CudaOps::attention_backward(const kernels::AttentionShape& s,
                                 const kernels::AttentionOptions& opt, const Tensor& qkv,
                                 const Tensor& probs, const Tensor& dout, Tensor& dqkv) const {
  MT_INPUT_CHECK(opt.softcap == 0.0f, kNoUnfusedSoftcap);
  const char* op = "attention_backward";
  expect(op, probs, "probs", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(qkv.dtype(), op, "qkv", [&]<typename T>() {
    expect_all<T>(op, {{&dout, "dout"}, {&dqkv, "dqkv"}});
    mc::DeviceMemory ws = workspace(kc::attention_backward_workspace_bytes(s, sizeof(T)));
    kc::attention_backward<T>(mc::gemm_context(), s, opt, ptr<T>(qkv), ptr<float>(probs),
                              ptr<T>(dout), ptr<T>(dqkv), ws.get(), stream());
  });
}

void CudaOps::flash_attention_forward(const kernels::AttentionShape& s,
                                      const kernels::AttentionOptions& opt, const Tensor& qkv,
                                      Tensor& out, Tensor& lse) const {
  const char* op = "flash_attention_forward";
  expect(op, lse, "lse", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(qkv.dtype(), op, "qkv", [&]<typename T>() {
    expect_all<T>(op, {{&out, "out"}});
    if (fused_on_cudnn(s, opt, qkv.dtype())) {
      mc::cudnn_attention_forward(s, opt, qkv.dtype(), ptr<T>(qkv), ptr<T>(out), ptr<float>(lse),
                                  stream());
      return;
    }
    kc::flash_attention_forward<T>(s, opt, ptr<T>(qkv), ptr<T>(out), ptr<float>(lse), nullptr,
                                   stream());
  });
}

void CudaOps::flash_attention_backward(const kernels::AttentionShape& s,
                                       const kernels::AttentionOptions& opt, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, const Tensor& dout,
                                       Tensor& dqkv) const {
  const char* op = "flash_attention_backward";
  expect(op, lse, "lse", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(qkv.dtype(), op, "qkv", [&]<typename T>() {
    expect_all<T>(op, {{&out, "out"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
    if (fused_on_cudnn(s, opt, qkv.dtype())) {
      mc::cudnn_attention_backward(s, opt, qkv.dtype(), ptr<T>(qkv), ptr<T>(out), ptr<float>(lse),
                                   ptr<T>(dout), ptr<T>(dqkv), stream());
      return;
    }
    mc::DeviceMemory ws = workspace(kc::flash_attention_backward_workspace_bytes(s));
    kc::flash_attention_backward<T>(s, opt, ptr<T>(qkv), ptr<T>(out), ptr<float>(lse), ptr<T>(dout),
                                    ptr<T>(dqkv), ws.get(), stream());
  });
}

// Per-head q/k norms (qk_layernorm: Qwen3, OLMo-style) inside the fused qkv.
void CudaOps::qk_rmsnorm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk, float eps,
                                 int64_t q_slots, Tensor& y, Tensor& rstd) const {
  const char* op = "qk_rmsnorm_forward";
  const int64_t Dh = wq.numel(), groups = x.numel() / Dh / (q_slots + 2);
  expect(op, rstd, "rstd", DType::F32);
  expect(op, wk, "wk", wq.dtype());
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    with_weight_type<T>(wq, op, [&]<typename W>() {
      kc::qk_rmsnorm_forward<T, W>(ptr<T>(x), ptr<W>(wq), ptr<W>(wk), ptr<T>(y), ptr<float>(rstd),
                                   groups, q_slots, Dh, eps, stream());
    });
  });
}

void CudaOps::qk_rmsnorm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                  const Tensor& rstd, const Tensor& dy, int64_t q_slots, Tensor& dx,
                                  Tensor& dwq, Tensor& dwk) const {
  const char* op = "qk_rmsnorm_backward";
  const int64_t Dh = wq.numel(), groups = x.numel() / Dh / (q_slots + 2);
  expect_all<float>(op, {{&rstd, "rstd"}, {&dwq, "dwq"}, {&dwk, "dwk"}});
  expect(op, wk, "wk", wq.dtype());
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    with_weight_type<T>(wq, op, [&]<typename W>() {
      mc::DeviceMemory ws = workspace(kc::qk_rmsnorm_backward_workspace_bytes(groups, Dh));
      kc::qk_rmsnorm_backward<T, W>(ptr<T>(x), ptr<W>(wq), ptr<W>(wk), ptr<float>(rstd), ptr<T>(dy),
                                    ptr<T>(dx), ptr<float>(dwq), ptr<float>(dwk), groups, q_slots,
                                    Dh, ws.get(), stream());
    });
  });
}

// Whole-projection q/k norms (OLMo-2): the statistics, then the norm (tp sums in between).
void CudaOps::qk_projection_sums(const Tensor& x, const Tensor* dy, const Tensor& wq,
                                 const Tensor& wk, const kernels::QkProjection& p,
                                 Tensor& sums) const {
  const char* op = "qk_projection_sums";
  expect(op, sums, "sums", DType::F32);
  expect(op, wk, "wk", wq.dtype());
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    if (dy != nullptr) expect_all<T>(op, {{dy, "dy"}});
    with_weight_type<T>(wq, op, [&]<typename W>() {
      kc::qk_projection_sums<T, W>(ptr<T>(x), dy ? ptr<T>(*dy) : nullptr, ptr<W>(wq), ptr<W>(wk),
                                   ptr<float>(sums), p, stream());
    });
  });
}

void CudaOps::qk_projection_norm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                         const Tensor& sums, const kernels::QkProjection& p,
                                         Tensor& y, Tensor& rstd) const {
  const char* op = "qk_projection_norm_forward";
  expect_all<float>(op, {{&sums, "sums"}, {&rstd, "rstd"}});
  expect(op, wk, "wk", wq.dtype());
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    with_weight_type<T>(wq, op, [&]<typename W>() {
      kc::qk_projection_norm_forward<T, W>(ptr<T>(x), ptr<W>(wq), ptr<W>(wk), ptr<float>(sums),
                                           ptr<T>(y), ptr<float>(rstd), p, stream());
    });
  });
}

void CudaOps::qk_projection_norm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                          const Tensor& rstd, const Tensor& dots, const Tensor& dy,
                                          const kernels::QkProjection& p, Tensor& dx, Tensor& dwq,
                                          Tensor& dwk) const {
  const char* op = "qk_projection_norm_backward";
  expect_all<float>(op, {{&rstd, "rstd"}, {&dots, "dots"}, {&dwq, "dwq"}, {&dwk, "dwk"}});
  expect(op, wk, "wk", wq.dtype());
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    with_weight_type<T>(wq, op, [&]<typename W>() {
      mc::DeviceMemory ws = workspace(kc::qk_projection_backward_workspace_bytes(p));
      kc::qk_projection_norm_backward<T, W>(
          ptr<T>(x), ptr<W>(wq), ptr<W>(wk), ptr<float>(rstd), ptr<float>(dots), ptr<T>(dy),
          ptr<T>(dx), ptr<float>(dwq), ptr<float>(dwk), p, ws.get(), stream());
    });
  });
}

// Context parallelism's block attention (megatron/transformer/context_parallel.h).
void CudaOps::flash_attention_block_forward(const kernels::AttentionShape& s,
                                            const kernels::AttentionOptions& opt,
                                            const kernels::AttentionBlock& b, const Tensor& q,
                                            const Tensor& kv, Tensor& out, Tensor& lse) const {
  const char* op = "flash_attention_block_forward";
  expect(op, lse, "lse", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(q.dtype(), op, "q", [&]<typename T>() {
    expect_all<T>(op, {{&kv, "kv"}, {&out, "out"}});
    kc::flash_block_forward<T>(s, opt, b, ptr<T>(q), ptr<T>(kv), ptr<T>(out), ptr<float>(lse),
                               stream());
  });
}

void CudaOps::flash_attention_block_backward(const kernels::AttentionShape& s,
                                             const kernels::AttentionOptions& opt,
                                             const kernels::AttentionBlock& b, const Tensor& q,
                                             const Tensor& kv, const Tensor& out, const Tensor& lse,
                                             const Tensor& dout, Tensor& dq, Tensor& dkv) const {
  const char* op = "flash_attention_block_backward";
  expect(op, lse, "lse", DType::F32);
  if (opt.key_mask != nullptr) require_device_pointer(opt.key_mask, op, "key_mask");
  if (opt.segment_ids != nullptr) require_device_pointer(opt.segment_ids, op, "segment_ids");
  with_storage_type(q.dtype(), op, "q", [&]<typename T>() {
    expect_all<T>(op, {{&kv, "kv"}, {&out, "out"}, {&dout, "dout"}, {&dq, "dq"}, {&dkv, "dkv"}});
    mc::DeviceMemory ws = workspace(kc::flash_block_backward_workspace_bytes(s, b));
    kc::flash_block_backward<T>(s, opt, b, ptr<T>(q), ptr<T>(kv), ptr<T>(out), ptr<float>(lse),
                                ptr<T>(dout), ptr<T>(dq), ptr<T>(dkv), ws.get(), stream());
  });
}

void CudaOps::flash_attention_merge(const Tensor& out, const Tensor& lse, Tensor& acc_out,
                                    Tensor& acc_lse, int64_t acc_row) const {
  expect_all<float>("flash_attention_merge",
                    {{&out, "out"}, {&lse, "lse"}, {&acc_out, "acc_out"}, {&acc_lse, "acc_lse"}});
  kc::flash_block_merge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), ptr<float>(out),
                        ptr<float>(lse), ptr<float>(acc_out), ptr<float>(acc_lse) + acc_row,
                        acc_lse.dim(2), stream());
}

void CudaOps::kv_cache_attention(const kernels::AttentionShape& s, float scale, const Tensor& qkv,
                                 Tensor& keys, Tensor& values, int64_t past, Tensor& out,
                                 int64_t window, float softcap, const Tensor* sinks) const {
  const char* op = "kv_cache_attention";
  if (sinks != nullptr) expect(op, *sinks, "sinks", DType::F32);
  with_storage_type(qkv.dtype(), op, "qkv", [&]<typename T>() {
    expect_all<T>(op, {{&keys, "keys"}, {&values, "values"}, {&out, "out"}});
    kc::kv_cache_attention<T>(s, scale, ptr<T>(qkv), ptr<T>(keys), ptr<T>(values), past,
                              keys.dim(2), ptr<T>(out), window, softcap,
                              sinks != nullptr ? ptr<float>(*sinks) : nullptr, stream());
  });
}

void CudaOps::attention_sinks_forward(const kernels::AttentionShape& s, const Tensor& sinks,
                                      const Tensor& lse, Tensor& out) const {
  const char* op = "attention_sinks_forward";
  expect(op, sinks, "sinks", DType::F32);
  expect(op, lse, "lse", DType::F32);
  with_storage_type(out.dtype(), op, "out", [&]<typename T>() {
    kc::attention_sinks_forward<T>(s, ptr<float>(sinks), ptr<float>(lse), ptr<T>(out), stream());
  });
}

void CudaOps::attention_sinks_backward(const kernels::AttentionShape& s, const Tensor& sinks,
                                       const Tensor& lse, const Tensor& out, const Tensor& dout,
                                       Tensor& dout_scaled, Tensor* dsinks) const {
  const char* op = "attention_sinks_backward";
  expect(op, sinks, "sinks", DType::F32);
  expect(op, lse, "lse", DType::F32);
  if (dsinks != nullptr) expect(op, *dsinks, "dsinks", DType::F32);
  with_storage_type(out.dtype(), op, "out", [&]<typename T>() {
    expect_all<T>(op, {{&dout, "dout"}, {&dout_scaled, "dout_scaled"}});
    kc::attention_sinks_backward<T>(s, ptr<float>(sinks), ptr<float>(lse), ptr<T>(out),
                                    ptr<T>(dout), ptr<T>(dout_scaled),
                                    dsinks != nullptr ? ptr<float>(*dsinks) : nullptr, stream());
  });
}

}  // namespace megatron::ops::cuda_backend
