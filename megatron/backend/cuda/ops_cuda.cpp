#include "megatron/backend/cuda/ops_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/storage_type.h"
#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/check.h"
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
using kc::dtype_of;
using kc::with_storage_type;

}  // namespace

void CudaOps::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) const {
  const char* op = "linear_forward";
  const int64_t out = w.dim(0), in = w.dim(1), n = x.numel() / in;
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&w, "w"}, {b, "b"}, {&y, "y"}});
    kc::gemm<T>(mc::gemm_context(), false, true, n, out, in, 1.0f, ptr<T>(x), in, ptr<T>(w), in,
                0.0f, ptr<T>(y), out, b ? ptr<T>(*b) : nullptr, stream());
  });
}

void CudaOps::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                              Tensor* dw, Tensor* db) const {
  const char* op = "linear_backward";
  const int64_t out = w.dim(0), in = w.dim(1), n = x.numel() / in;
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&w, "w"}, {&dy, "dy"}, {dx, "dx"}});
    MT_CHECK(!dw || dw->dtype() == dtype_of<T>() || dw->dtype() == DType::F32, op,
             ": dw must be fp32 or ", dtype_name(dtype_of<T>()), " on cuda, got ",
             dtype_name(dw->dtype()));
    if (db) expect(op, *db, "db", DType::F32);
    kc::GemmContext& ctx = mc::gemm_context();
    if (dx)  // dx[n, in] = dy[n, out] @ w[out, in]
      kc::gemm<T>(ctx, false, false, n, in, out, 1.0f, ptr<T>(dy), out, ptr<T>(w), in, 0.0f,
                  ptr<T>(*dx), in, nullptr, stream());
    // dw[out, in] += dy^T @ x, accumulated in fp32 when dw is fp32 (main grads)
    if (dw) {
      kc::GemmArgs a;
      a.trans_a = true;
      a.M = out;
      a.N = in;
      a.K = n;
      a.alpha = 1.0f;
      a.beta = 1.0f;
      a.A = dy.raw();
      a.lda = out;
      a.B = x.raw();
      a.ldb = in;
      a.C = dw->raw();
      a.ldc = in;
      a.ab_type = dtype_of<T>();
      a.c_type = dw->dtype();
      ctx.run(a, stream());
    }
    if (db) {
      mc::DeviceMemory ws = workspace(kc::bias_grad_workspace_bytes(n, out));
      kc::bias_grad<T>(ptr<T>(dy), n, out, ptr<float>(*db), ws.get(), stream());
    }
  });
}

void CudaOps::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                                Tensor& y, Tensor& mean, Tensor& rstd) const {
  const char* op = "layernorm_forward";
  const int64_t d = w.numel(), n = x.numel() / d;
  expect(op, mean, "mean", DType::F32);
  expect(op, rstd, "rstd", DType::F32);
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    with_weight_type<T>(w, op, [&]<typename W>() {
      expect(op, b, "b", dtype_of<W>());
      kc::layernorm_forward<T, W>(ptr<T>(x), ptr<W>(w), ptr<W>(b), ptr<T>(y), ptr<float>(mean),
                                  ptr<float>(rstd), n, d, eps, stream());
    });
  });
}

void CudaOps::layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw,
                                 Tensor& db) const {
  const char* op = "layernorm_backward";
  const int64_t d = w.numel(), n = x.numel() / d;
  expect_all<float>(op, {{&mean, "mean"}, {&rstd, "rstd"}, {&dw, "dw"}, {&db, "db"}});
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    with_weight_type<T>(w, op, [&]<typename W>() {
      mc::DeviceMemory ws = workspace(kc::norm_backward_workspace_bytes(n, d));
      kc::layernorm_backward<T, W>(ptr<T>(x), ptr<W>(w), ptr<float>(mean), ptr<float>(rstd),
                                   ptr<T>(dy), ptr<T>(dx), ptr<float>(dw), ptr<float>(db), n, d,
                                   ws.get(), stream());
    });
  });
}

void CudaOps::rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y,
                              Tensor& rstd) const {
  const char* op = "rmsnorm_forward";
  const int64_t d = w.numel(), n = x.numel() / d;
  expect(op, rstd, "rstd", DType::F32);
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    with_weight_type<T>(w, op, [&]<typename W>() {
      kc::rmsnorm_forward<T, W>(ptr<T>(x), ptr<W>(w), ptr<T>(y), ptr<float>(rstd), n, d, eps,
                                stream());
    });
  });
}

void CudaOps::rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& dy, Tensor& dx, Tensor& dw) const {
  const char* op = "rmsnorm_backward";
  const int64_t d = w.numel(), n = x.numel() / d;
  expect_all<float>(op, {{&rstd, "rstd"}, {&dw, "dw"}});
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    with_weight_type<T>(w, op, [&]<typename W>() {
      mc::DeviceMemory ws = workspace(kc::norm_backward_workspace_bytes(n, d));
      kc::rmsnorm_backward<T, W>(ptr<T>(x), ptr<W>(w), ptr<float>(rstd), ptr<T>(dy), ptr<T>(dx),
                                 ptr<float>(dw), n, d, ws.get(), stream());
    });
  });
}

void CudaOps::gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind) const {
  const char* op = "gelu_forward";
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    kc::gelu_forward<T>(ptr<T>(x), ptr<T>(y), x.numel(), kind, stream());
  });
}

void CudaOps::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind) const {
  const char* op = "gelu_backward";
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    kc::gelu_backward<T>(ptr<T>(x), ptr<T>(dy), ptr<T>(dx), x.numel(), kind, stream());
  });
}

void CudaOps::tanh_forward(const Tensor& x, Tensor& y) const {
  const char* op = "tanh_forward";
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    kc::tanh_forward<T>(ptr<T>(x), ptr<T>(y), x.numel(), stream());
  });
}

void CudaOps::tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) const {
  const char* op = "tanh_backward";
  with_storage_type(y.dtype(), op, "y", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    kc::tanh_backward<T>(ptr<T>(y), ptr<T>(dy), ptr<T>(dx), y.numel(), stream());
  });
}

void CudaOps::glu_forward(const Tensor& x, Tensor& y, math::Glu glu) const {
  const char* op = "glu_forward";
  const int64_t f = y.dim(y.ndim() - 1), n = y.numel() / f;
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    kc::glu_forward<T>(ptr<T>(x), ptr<T>(y), n, f, glu, stream());
  });
}

void CudaOps::glu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Glu glu) const {
  const char* op = "glu_backward";
  const int64_t f = dy.dim(dy.ndim() - 1), n = dy.numel() / f;
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&dy, "dy"}, {&dx, "dx"}});
    kc::glu_backward<T>(ptr<T>(x), ptr<T>(dy), ptr<T>(dx), n, f, glu, stream());
  });
}

void CudaOps::embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start,
                                Tensor& out) const {
  const char* op = "embedding_forward";
  with_storage_type(table.dtype(), op, "table", [&]<typename T>() {
    expect_all<T>(op, {{&out, "out"}});
    kc::embedding_forward<T>(ptr<int32_t>(ids), ids.numel(), ptr<T>(table), vocab_start,
                             table.dim(0), table.dim(1), ptr<T>(out), stream());
  });
}

void CudaOps::embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start,
                                 Tensor& dtable) const {
  const char* op = "embedding_backward";
  expect(op, dtable, "dtable", DType::F32);
  with_storage_type(dout.dtype(), op, "dout", [&]<typename T>() {
    kc::embedding_backward<T>(ptr<int32_t>(ids), ids.numel(), ptr<T>(dout), vocab_start,
                              dtable.dim(0), dtable.dim(1), ptr<float>(dtable), stream());
  });
}

void CudaOps::rope_forward(const kernels::AttentionShape& s, Tensor& qkv,
                           const math::RopeFrequencies& rope, int64_t position_offset,
                           const Tensor* positions) const {
  with_storage_type(qkv.dtype(), "rope_forward", "qkv", [&]<typename T>() {
    kc::rope_forward<T>(s, ptr<T>(qkv), rope, position_offset,
                        positions ? positions->data<int32_t>() : nullptr, stream());
  });
}

void CudaOps::rope_backward(const kernels::AttentionShape& s, Tensor& dqkv,
                            const math::RopeFrequencies& rope, int64_t position_offset,
                            const Tensor* positions) const {
  with_storage_type(dqkv.dtype(), "rope_backward", "dqkv", [&]<typename T>() {
    kc::rope_backward<T>(s, ptr<T>(dqkv), rope, position_offset,
                         positions ? positions->data<int32_t>() : nullptr, stream());
  });
}

void CudaOps::dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed,
                              uint64_t rng_stream, uint64_t index_offset) const {
  const char* op = "dropout_forward";
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    kc::dropout_forward<T>(ptr<T>(x), ptr<T>(y), x.numel(), p, seed, rng_stream, index_offset,
                           stream());
  });
}

void CudaOps::dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                           uint64_t seed, uint64_t rng_stream) const {
  const char* op = "dropout_rows";
  with_storage_type(x.dtype(), op, "x", [&]<typename T>() {
    expect_all<T>(op, {{&y, "y"}});
    kc::dropout_rows<T>(ptr<T>(x), ptr<T>(y), rows, p, seed, rng_stream, stream());
  });
}

void CudaOps::dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed,
                               uint64_t rng_stream, uint64_t index_offset) const {
  const char* op = "dropout_backward";
  with_storage_type(dy.dtype(), op, "dy", [&]<typename T>() {
    expect_all<T>(op, {{&dx, "dx"}});
    kc::dropout_backward<T>(ptr<T>(dy), ptr<T>(dx), dy.numel(), p, seed, rng_stream, index_offset,
                            stream());
  });
}

void CudaOps::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                    const kernels::VocabSlice& vs, int32_t ignore_index,
                                    Tensor& loss, Tensor& lse) const {
  const char* op = "cross_entropy_forward";
  expect(op, loss, "loss", DType::F32);
  expect(op, lse, "lse", DType::F32);
  with_storage_type(logits.dtype(), op, "logits", [&]<typename T>() {
    kc::cross_entropy_forward<T>(ptr<T>(logits), ptr<int32_t>(targets), targets.numel(), vs,
                                 ignore_index, ptr<float>(loss), ptr<float>(lse), stream());
  });
}

void CudaOps::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                     const kernels::VocabSlice& vs, int32_t ignore_index,
                                     const Tensor& lse, const Tensor& dloss,
                                     Tensor& dlogits) const {
  const char* op = "cross_entropy_backward";
  expect(op, lse, "lse", DType::F32);
  expect(op, dloss, "dloss", DType::F32);
  with_storage_type(logits.dtype(), op, "logits", [&]<typename T>() {
    expect_all<T>(op, {{&dlogits, "dlogits"}});
    kc::cross_entropy_backward<T>(ptr<T>(logits), ptr<int32_t>(targets), targets.numel(), vs,
                                  ignore_index, ptr<float>(lse), ptr<float>(dloss), ptr<T>(dlogits),
                                  stream());
  });
}

void CudaOps::cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs,
                                    Tensor& row_max) const {
  const char* op = "cross_entropy_row_max";
  expect(op, row_max, "row_max", DType::F32);
  with_storage_type(logits.dtype(), op, "logits", [&]<typename T>() {
    kc::cross_entropy_row_max<T>(ptr<T>(logits), row_max.numel(), vs, ptr<float>(row_max),
                                 stream());
  });
}

void CudaOps::cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                                    const kernels::VocabSlice& vs, const Tensor& row_max,
                                    Tensor& sum_exp, Tensor& target_logit) const {
  const char* op = "cross_entropy_sum_exp";
  expect_all<float>(
      op, {{&row_max, "row_max"}, {&sum_exp, "sum_exp"}, {&target_logit, "target_logit"}});
  with_storage_type(logits.dtype(), op, "logits", [&]<typename T>() {
    kc::cross_entropy_sum_exp<T>(ptr<T>(logits), ptr<int32_t>(targets), targets.numel(), vs,
                                 ptr<float>(row_max), ptr<float>(sum_exp), ptr<float>(target_logit),
                                 stream());
  });
}

void CudaOps::cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                                 const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                                 Tensor& lse) const {
  expect_all<float>("cross_entropy_loss", {{&row_max, "row_max"},
                                           {&sum_exp, "sum_exp"},
                                           {&target_logit, "target_logit"},
                                           {&loss, "loss"},
                                           {&lse, "lse"}});
  const int64_t n = targets.numel();
  kc::cross_entropy_loss(ptr<int32_t>(targets), n, ignore_index, ptr<float>(row_max),
                         ptr<float>(sum_exp), ptr<float>(target_logit), ptr<float>(loss), stream());
  kc::cross_entropy_lse(ptr<float>(row_max), ptr<float>(sum_exp), n, ptr<float>(lse), stream());
}

void CudaOps::add(const Tensor& a, const Tensor& b, Tensor& out) const {
  const char* op = "add";
  with_storage_type(a.dtype(), op, "a", [&]<typename T>() {
    expect_all<T>(op, {{&b, "b"}, {&out, "out"}});
    kc::add<T>(ptr<T>(a), ptr<T>(b), ptr<T>(out), a.numel(), stream());
  });
}

void CudaOps::add_bias(Tensor& y, const Tensor& bias) const {
  const char* op = "add_bias";
  with_storage_type(y.dtype(), op, "y", [&]<typename T>() {
    expect_all<T>(op, {{&bias, "bias"}});
    const int64_t n = bias.numel();
    kc::add_bias<T>(ptr<T>(y), ptr<T>(bias), n > 0 ? y.numel() / n : 0, n, stream());
  });
}

void CudaOps::add_inplace(Tensor& acc, const Tensor& x) const {
  const char* op = "add_inplace";
  with_storage_type(x.dtype(), op, "x", [&]<typename TX>() {
    if (acc.dtype() == dtype_of<TX>()) {
      kc::add_inplace<TX, TX>(ptr<TX>(acc), ptr<TX>(x), acc.numel(), stream());
    } else {
      MT_CHECK(acc.dtype() == DType::F32, op, ": acc must be ", dtype_name(dtype_of<TX>()),
               " or fp32 on cuda, got ", dtype_name(acc.dtype()));
      if constexpr (!std::is_same_v<TX, float>)
        kc::add_inplace<float, TX>(ptr<float>(acc), ptr<TX>(x), acc.numel(), stream());
    }
  });
}

void CudaOps::fill(Tensor& x, float v) const {
  with_storage_type(x.dtype(), "fill", "x",
                    [&]<typename T>() { kc::fill<T>(ptr<T>(x), v, x.numel(), stream()); });
}

void CudaOps::scale_inplace(Tensor& x, float s) const {
  with_storage_type(x.dtype(), "scale_inplace", "x",
                    [&]<typename T>() { kc::scale_inplace<T>(ptr<T>(x), s, x.numel(), stream()); });
}

void CudaOps::cast(const Tensor& src, Tensor& dst) const {
  with_storage_type(src.dtype(), "cast", "src", [&]<typename TSrc>() {
    with_storage_type(dst.dtype(), "cast", "dst", [&]<typename TDst>() {
      kc::cast<TSrc, TDst>(ptr<TSrc>(src), ptr<TDst>(dst), src.numel(), stream());
    });
  });
}

void CudaOps::adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const math::AdamWParams& p) const {
  const char* op = "adamw_step";
  expect_all<float>(op, {{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}});
  if (param.numel() == 0) return;
  kc::adamw_step(ptr<float>(param), ptr<float>(grad), ptr<float>(m), ptr<float>(v), param.numel(),
                 p, stream());
}

int64_t CudaOps::count_outside(const Tensor& x, float limit) const {
  unsigned long long result = 0;
  with_storage_type(x.dtype(), "count_outside", "x", [&]<typename T>() {
    mc::DeviceMemory count = workspace(sizeof(unsigned long long));
    MT_CUDA_CHECK(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), stream()));
    kc::count_outside<T>(ptr<T>(x), x.numel(), limit, count.as<unsigned long long>(), stream());
    MT_CUDA_CHECK(cudaMemcpyAsync(&result, count.get(), sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream()));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  });
  return static_cast<int64_t>(result);
}

double CudaOps::sum_squares(const Tensor& x) const {
  double result = 0.0;
  with_storage_type(x.dtype(), "sum_squares", "x", [&]<typename T>() {
    mc::DeviceMemory out = workspace(sizeof(double));
    mc::DeviceMemory ws = workspace(kc::sum_squares_workspace_bytes(1));
    kc::sum_squares<T>(ptr<T>(x), x.numel(), out.as<double>(), ws.get(), stream());
    MT_CUDA_CHECK(
        cudaMemcpyAsync(&result, out.get(), sizeof(double), cudaMemcpyDeviceToHost, stream()));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  });
  return result;
}

double CudaOps::sum_squares_of(const std::vector<Tensor>& xs) const {
  double result = 0.0;
  with_storage_type(xs.front().dtype(), "sum_squares_of", "xs", [&]<typename T>() {
    std::vector<const T*> ptrs;
    std::vector<int64_t> sizes;
    for (const Tensor& x : xs) {
      expect("sum_squares_of", x, "xs[i]", dtype_of<T>());
      ptrs.push_back(ptr<T>(x));
      sizes.push_back(x.numel());
    }
    mc::DeviceMemory out = workspace(sizeof(double));
    mc::DeviceMemory ws = workspace(kc::sum_squares_workspace_bytes(static_cast<int>(xs.size())));
    kc::multi_tensor_sum_squares<T>(ptrs, sizes, out.as<double>(), ws.get(), stream());
    MT_CUDA_CHECK(
        cudaMemcpyAsync(&result, out.get(), sizeof(double), cudaMemcpyDeviceToHost, stream()));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  });
  return result;
}

}  // namespace megatron::ops::cuda_backend
