// Every CUDA kernel against the CPU kernel on the same inputs (rounded to the storage type
// first, so only the kernels' own error is measured), for each storage type: fp32, bf16, fp16.
// Errors are norm-relative (max |gpu - cpu| / max |cpu|) with per-dtype tolerances; dropout
// masks must be bit-identical to the CPU's, and the fp32 embedding gradient bit-identical too.
// Without a CUDA build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/softmax.h"
#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/device.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaKernels, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace mc = megatron::cuda;
namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
namespace math = megatron::math;
using megatron::DType;

#define REQUIRE_GPU() \
  if (mc::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

// ---- storage-type helpers ----------------------------------------------------------------------

template <typename T>
float round_to(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return math::bf16_bits_to_float(math::float_to_bf16_bits(x));
  if constexpr (std::is_same_v<T, __half>)
    return math::fp16_bits_to_float(math::float_to_fp16_bits(x));
}

template <typename T>
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_to<T>(x);
  return v;
}

template <typename T>
T to_storage(float x) {
  T t;
  if constexpr (std::is_same_v<T, float>) {
    t = x;
  } else {
    const uint16_t bits = std::is_same_v<T, __nv_bfloat16> ? math::float_to_bf16_bits(x)
                                                           : math::float_to_fp16_bits(x);
    std::memcpy(static_cast<void*>(&t), &bits, 2);
  }
  return t;
}

template <typename T>
float from_storage(T t) {
  if constexpr (std::is_same_v<T, float>) {
    return t;
  } else {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const void*>(&t), 2);
    return std::is_same_v<T, __nv_bfloat16> ? math::bf16_bits_to_float(bits)
                                            : math::fp16_bits_to_float(bits);
  }
}

// Device array of T, filled from / read back into float vectors.
template <typename T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n), buf_(std::max<size_t>(n, 1) * sizeof(T)) { buf_.zero(); }
  explicit Dev(const std::vector<float>& host) : Dev(host.size()) { set(host); }
  void set(const std::vector<float>& host) {
    std::vector<T> s(host.size());
    for (size_t i = 0; i < host.size(); ++i) s[i] = to_storage<T>(host[i]);
    buf_.copy_from_host(s.data(), s.size() * sizeof(T));
  }
  std::vector<float> get() const {
    std::vector<T> s(n_);
    buf_.copy_to_host(s.data(), n_ * sizeof(T));
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = from_storage<T>(s[i]);
    return out;
  }
  T* p() const { return buf_.as<T>(); }

 private:
  size_t n_;
  mc::DeviceBuffer buf_;
};

template <typename V>
class DevRaw {  // ints, doubles: copied as is
 public:
  explicit DevRaw(const std::vector<V>& host)
      : n_(host.size()), buf_(std::max<size_t>(n_, 1) * sizeof(V)) {
    buf_.copy_from_host(host.data(), n_ * sizeof(V));
  }
  explicit DevRaw(size_t n) : n_(n), buf_(std::max<size_t>(n, 1) * sizeof(V)) { buf_.zero(); }
  std::vector<V> get() const {
    std::vector<V> out(n_);
    buf_.copy_to_host(out.data(), n_ * sizeof(V));
    return out;
  }
  V* p() const { return buf_.as<V>(); }

 private:
  size_t n_;
  mc::DeviceBuffer buf_;
};

struct Workspace {
  explicit Workspace(size_t bytes) : buf(std::max<size_t>(bytes, 1)) {}
  void* p() const { return buf.data(); }
  mc::DeviceBuffer buf;
};

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
double tol() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return 1e-2;
  return 2e-3;
}

// max |a - b| / max |b| (b is the CPU reference).
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(b[i])) continue;
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

#define EXPECT_CLOSE(gpu, cpu, tolerance) \
  EXPECT_LE(rel_error((gpu), (cpu)), (tolerance)) << #gpu " vs " #cpu

template <typename T>
DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::BF16;
  return DType::F16;
}

kc::GemmContext& gemm_ctx() {
  static kc::GemmContext ctx(mc::device_allocator());
  return ctx;
}

// ---- typed tests over the storage types -------------------------------------------------------

template <typename T>
class CudaOps : public ::testing::Test {};
struct StorageNames {
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "fp32";
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bf16";
    return "fp16";
  }
};
using StorageTypes = ::testing::Types<float, __nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaOps, StorageTypes, StorageNames);

TYPED_TEST(CudaOps, Elementwise) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t n = 100003, rows = 37, F = 129;
  const auto a = rounded<T>(randn(n, 1, 2.0f)), b = rounded<T>(randn(n, 2, 2.0f));
  std::vector<float> ref(n);
  Dev<T> da(a), db(b), dout(n);

  kp::add(a.data(), b.data(), ref.data(), n);
  kc::add(da.p(), db.p(), dout.p(), n, nullptr);
  EXPECT_CLOSE(dout.get(), ref, tol<T>());

  std::vector<float> acc = a;
  kp::add_inplace(acc.data(), b.data(), n);
  Dev<T> dacc(a);
  kc::add_inplace(dacc.p(), db.p(), n, nullptr);
  EXPECT_CLOSE(dacc.get(), acc, tol<T>());

  std::vector<float> sc = a;
  kp::scale_inplace(sc.data(), 0.37f, n);
  Dev<T> dsc(a);
  kc::scale_inplace(dsc.p(), 0.37f, n, nullptr);
  EXPECT_CLOSE(dsc.get(), sc, tol<T>());

  kc::fill(dsc.p(), 1.5f, n, nullptr);
  EXPECT_EQ(dsc.get(), std::vector<float>(n, 1.5f));

  kp::gelu_forward(a.data(), ref.data(), n);
  kc::gelu_forward(da.p(), dout.p(), n, nullptr);
  EXPECT_CLOSE(dout.get(), ref, tol<T>());
  kp::gelu_backward(a.data(), b.data(), ref.data(), n);
  kc::gelu_backward(da.p(), db.p(), dout.p(), n, nullptr);
  EXPECT_CLOSE(dout.get(), ref, tol<T>());

  const auto x = rounded<T>(randn(rows * 2 * F, 3, 2.0f)), dy = rounded<T>(randn(rows * F, 4));
  std::vector<float> y(rows * F), dx(rows * 2 * F);
  Dev<T> dx_in(x), ddy(dy), dy_out(rows * F), ddx(rows * 2 * F);
  kp::swiglu_forward(x.data(), y.data(), rows, F);
  kc::swiglu_forward(dx_in.p(), dy_out.p(), rows, F, nullptr);
  EXPECT_CLOSE(dy_out.get(), y, tol<T>());
  kp::swiglu_backward(x.data(), dy.data(), dx.data(), rows, F);
  kc::swiglu_backward(dx_in.p(), ddy.p(), ddx.p(), rows, F, nullptr);
  EXPECT_CLOSE(ddx.get(), dx, tol<T>());
}

TYPED_TEST(CudaOps, CastRoundsToNearestEvenLikeTheHost) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::vector<float> x = randn(65536, 5, 100.0f);
  x.push_back(0.0f);
  x.push_back(-0.0f);
  x.push_back(1e-30f);
  x.push_back(70000.0f);  // fp16 overflow -> inf
  x.push_back(INFINITY);
  Dev<float> dx(x);
  Dev<T> dt(x.size());
  kc::cast(dx.p(), dt.p(), int64_t(x.size()), nullptr);
  const std::vector<float> got = dt.get();
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = round_to<T>(x[i]);
    ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << i << ": " << x[i];
  }
  Dev<float> back(x.size());
  kc::cast(dt.p(), back.p(), int64_t(x.size()), nullptr);
  EXPECT_EQ(back.get(), got);
}

TYPED_TEST(CudaOps, DropoutMasksAreBitIdentical) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t n = 50001;
  std::vector<float> x = randn(n, 6);
  for (float& v : x) v = round_to<T>(1.0f + std::abs(v));  // nonzero: the mask is visible
  for (const uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(1) << 33}) {
    for (const float p : {0.0f, 0.1f, 0.5f}) {
      std::vector<float> ref(n), ref_b(n);
      kp::dropout_forward(x.data(), ref.data(), n, p, 1234, 7, offset);
      kp::dropout_backward(x.data(), ref_b.data(), n, p, 1234, 7, offset);
      Dev<T> dx(x), dy(n), ddx(n);
      kc::dropout_forward(dx.p(), dy.p(), n, p, 1234, 7, offset, nullptr);
      kc::dropout_backward(dx.p(), ddx.p(), n, p, 1234, 7, offset, nullptr);
      const auto y = dy.get(), yb = ddx.get();
      int64_t mismatched = 0;
      for (int64_t i = 0; i < n; ++i) {
        mismatched += (y[i] == 0.0f) != (ref[i] == 0.0f);
        mismatched += (yb[i] == 0.0f) != (ref_b[i] == 0.0f);
      }
      EXPECT_EQ(mismatched, 0) << "p=" << p << " offset=" << offset;
      if (std::is_same_v<T, float>) {
        EXPECT_EQ(y, ref) << "fp32 dropout must be bit-identical";
        EXPECT_EQ(yb, ref_b);
      } else {
        EXPECT_CLOSE(y, ref, tol<T>());
      }
    }
  }
}

TYPED_TEST(CudaOps, Softmax) {
  REQUIRE_GPU();
  using T = TypeParam;
  for (const int64_t L : {int64_t(1), int64_t(7), int64_t(1000), int64_t(5000)}) {
    const int64_t rows = 33;
    auto x = rounded<T>(randn(rows * L, 7, 3.0f));
    for (int64_t j = 0; j < L; ++j) x[j] = -INFINITY;  // row 0 fully masked: zeros
    const auto dy = rounded<T>(randn(rows * L, 8));
    std::vector<float> y(rows * L), dx(rows * L);
    kp::softmax_forward(x.data(), y.data(), rows, L, 0.7f);
    const auto yr = rounded<T>(y);
    kp::softmax_backward(yr.data(), dy.data(), dx.data(), rows, L, 0.7f);
    Dev<T> dxin(x), dyout(rows * L), dyr(yr), ddy(dy), ddx(rows * L);
    kc::softmax_forward(dxin.p(), dyout.p(), rows, L, 0.7f, nullptr);
    kc::softmax_backward(dyr.p(), ddy.p(), ddx.p(), rows, L, 0.7f, nullptr);
    EXPECT_CLOSE(dyout.get(), y, tol<T>()) << "L=" << L;
    EXPECT_CLOSE(ddx.get(), dx, tol<T>()) << "L=" << L;
  }
}

template <typename T, typename W>
void check_norms(int64_t rows, int64_t D) {
  const auto x = rounded<T>(randn(rows * D, 9, 2.0f, 0.5f));
  const auto w = rounded<W>(randn(D, 10, 0.3f, 1.0f)), b = rounded<W>(randn(D, 11, 0.1f));
  const auto dy = rounded<T>(randn(rows * D, 12));
  std::vector<float> y(rows * D), mean(rows), rstd(rows), dx(rows * D);
  std::vector<float> dw = randn(D, 13), db = randn(D, 14);  // accumulated into
  const std::vector<float> dw0 = dw, db0 = db;
  kp::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, D,
                        1e-5f);
  kp::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                         dw.data(), db.data(), rows, D);
  Dev<T> dxin(x), dyout(rows * D), ddy(dy), ddx(rows * D);
  Dev<W> dwt(w), dbt(b);
  Dev<float> dmean(rows), drstd(rows), ddw(dw0), ddb(db0);
  Workspace ws(kc::norm_backward_workspace_bytes(rows, D));
  kc::layernorm_forward(dxin.p(), dwt.p(), dbt.p(), dyout.p(), dmean.p(), drstd.p(), rows, D, 1e-5f,
                        nullptr);
  kc::layernorm_backward(dxin.p(), dwt.p(), dmean.p(), drstd.p(), ddy.p(), ddx.p(), ddw.p(),
                         ddb.p(), rows, D, ws.p(), nullptr);
  EXPECT_CLOSE(dyout.get(), y, tol<T>());
  EXPECT_CLOSE(dmean.get(), mean, 1e-5);
  EXPECT_CLOSE(drstd.get(), rstd, 1e-5);
  EXPECT_CLOSE(ddx.get(), dx, tol<T>());
  EXPECT_CLOSE(ddw.get(), dw, 1e-5);
  EXPECT_CLOSE(ddb.get(), db, 1e-5);
  // Deterministic: the same call again adds exactly the same amounts.
  const auto dw_once = ddw.get();
  ddw.set(dw0);
  kc::layernorm_backward(dxin.p(), dwt.p(), dmean.p(), drstd.p(), ddy.p(), ddx.p(), ddw.p(),
                         ddb.p(), rows, D, ws.p(), nullptr);
  EXPECT_EQ(ddw.get(), dw_once);

  std::vector<float> ry(rows * D), rrstd(rows), rdx(rows * D), rdw = dw0;
  kp::rmsnorm_forward(x.data(), w.data(), ry.data(), rrstd.data(), rows, D, 1e-6f);
  kp::rmsnorm_backward(x.data(), w.data(), rrstd.data(), dy.data(), rdx.data(), rdw.data(), rows,
                       D);
  Dev<float> drdw(dw0);
  kc::rmsnorm_forward(dxin.p(), dwt.p(), dyout.p(), drstd.p(), rows, D, 1e-6f, nullptr);
  kc::rmsnorm_backward(dxin.p(), dwt.p(), drstd.p(), ddy.p(), ddx.p(), drdw.p(), rows, D, ws.p(),
                       nullptr);
  EXPECT_CLOSE(dyout.get(), ry, tol<T>());
  EXPECT_CLOSE(drstd.get(), rrstd, 1e-5);
  EXPECT_CLOSE(ddx.get(), rdx, tol<T>());
  EXPECT_CLOSE(drdw.get(), rdw, 1e-5);
}

TYPED_TEST(CudaOps, LayerNormAndRmsNorm) {
  REQUIRE_GPU();
  check_norms<TypeParam, TypeParam>(1, 7);
  check_norms<TypeParam, TypeParam>(300, 769);  // several row chunks, ragged column tile
}

TEST(CudaKernels, NormsWithFp32WeightsAndLowPrecisionActivations) {
  REQUIRE_GPU();
  check_norms<__nv_bfloat16, float>(129, 512);
  check_norms<__half, float>(129, 512);
}

TYPED_TEST(CudaOps, Embedding) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t vocab_start = 100, vocab_rows = 50, dim = 67, n = 513;
  std::mt19937 rng(15);
  std::uniform_int_distribution<int32_t> id(90, 160);  // some ids outside the slice
  std::vector<int32_t> ids(n);
  for (auto& v : ids) v = id(rng);
  ids[0] = ids[1] = ids[2] = 120;  // repeated rows
  const auto table = rounded<T>(randn(vocab_rows * dim, 16));
  const auto dout = rounded<T>(randn(n * dim, 17));
  std::vector<float> out(n * dim), dtable = randn(vocab_rows * dim, 18);
  const std::vector<float> dtable0 = dtable;
  kp::embedding_forward(ids.data(), n, table.data(), vocab_start, vocab_rows, dim, out.data());
  kp::embedding_backward(ids.data(), n, dout.data(), vocab_start, vocab_rows, dim, dtable.data());
  DevRaw<int32_t> dids(ids);
  Dev<T> dtab(table), dout_dev(dout), dres(n * dim);
  Dev<float> ddtab(dtable0);
  kc::embedding_forward(dids.p(), n, dtab.p(), vocab_start, vocab_rows, dim, dres.p(), nullptr);
  kc::embedding_backward(dids.p(), n, dout_dev.p(), vocab_start, vocab_rows, dim, ddtab.p(),
                         nullptr);
  EXPECT_EQ(dres.get(), out) << "a lookup is a copy";
  EXPECT_EQ(ddtab.get(), dtable) << "tokens are added in token order, as on the CPU";
}

TYPED_TEST(CudaOps, Rope) {
  REQUIRE_GPU();
  using T = TypeParam;
  megatron::kernels::AttentionShape s{5, 3, 6, 2, 32};
  const int64_t n = s.S * s.B * (s.H + 2 * s.G) * s.Dh;
  const auto qkv = rounded<T>(randn(n, 19));
  std::vector<float> fwd = qkv, bwd = qkv;
  kp::rope_forward(s, fwd.data(), 10000.0f, 4000);
  kp::rope_backward(s, bwd.data(), 10000.0f, 4000);
  Dev<T> dfwd(qkv), dbwd(qkv);
  kc::rope_forward(s, dfwd.p(), 10000.0f, 4000, nullptr);
  kc::rope_backward(s, dbwd.p(), 10000.0f, 4000, nullptr);
  EXPECT_CLOSE(dfwd.get(), fwd, tol<T>());
  EXPECT_CLOSE(dbwd.get(), bwd, tol<T>());
}

TYPED_TEST(CudaOps, CrossEntropy) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t N = 41;
  // A middle vocab shard [64, 64 + 96) of a vocabulary with 150 real tokens (columns >= 150 pad).
  for (const megatron::kernels::VocabSlice vs :
       {megatron::kernels::VocabSlice{200, 0, 150}, megatron::kernels::VocabSlice{96, 64, 150},
        megatron::kernels::VocabSlice{96, 128, 150}}) {
    const int32_t ignore = -100;
    std::mt19937 rng(20);
    std::uniform_int_distribution<int32_t> tgt(0, 149);
    std::vector<int32_t> targets(N);
    for (auto& t : targets) t = tgt(rng);
    targets[3] = ignore;
    const auto logits = rounded<T>(randn(N * vs.V_local, 21, 3.0f));
    const auto dloss = randn(N, 22);
    std::vector<float> row_max(N), sum_exp(N), target_logit(N), loss(N), lse(N), floss(N);
    kp::cross_entropy_row_max(logits.data(), N, vs, row_max.data());
    kp::cross_entropy_sum_exp(logits.data(), targets.data(), N, vs, row_max.data(), sum_exp.data(),
                              target_logit.data());
    kp::cross_entropy_loss(targets.data(), N, ignore, row_max.data(), sum_exp.data(),
                           target_logit.data(), loss.data());
    DevRaw<int32_t> dt(targets);
    Dev<T> dl(logits);
    Dev<float> dmax(N), dsum(N), dtl(N), dloss_out(N), dlse(N), ddloss(dloss);
    kc::cross_entropy_row_max(dl.p(), N, vs, dmax.p(), nullptr);
    kc::cross_entropy_sum_exp(dl.p(), dt.p(), N, vs, dmax.p(), dsum.p(), dtl.p(), nullptr);
    kc::cross_entropy_loss(dt.p(), N, ignore, dmax.p(), dsum.p(), dtl.p(), dloss_out.p(), nullptr);
    EXPECT_EQ(dmax.get(), row_max);
    EXPECT_CLOSE(dsum.get(), sum_exp, 1e-5);
    EXPECT_EQ(dtl.get(), target_logit);
    EXPECT_CLOSE(dloss_out.get(), loss, 1e-5);
    if (vs.vocab_start == 0) {  // the fused single-device path
      std::vector<float> dlogits(N * vs.V_local);
      kp::cross_entropy_forward(logits.data(), targets.data(), N, vs, ignore, floss.data(),
                                lse.data());
      kp::cross_entropy_backward(logits.data(), targets.data(), N, vs, ignore, lse.data(),
                                 dloss.data(), dlogits.data());
      kc::cross_entropy_forward(dl.p(), dt.p(), N, vs, ignore, dloss_out.p(), dlse.p(), nullptr);
      EXPECT_CLOSE(dloss_out.get(), floss, 1e-5);
      EXPECT_CLOSE(dlse.get(), lse, 1e-5);
      kc::cross_entropy_backward(dl.p(), dt.p(), N, vs, ignore, dlse.p(), ddloss.p(), dl.p(),
                                 nullptr);  // in place
      EXPECT_CLOSE(dl.get(), dlogits, tol<T>());
    }
  }
}

TYPED_TEST(CudaOps, GemmAllTransposesBiasAndBeta) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t M = 37, N = 53, K = 71;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool with_bias : {false, true}) {
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const auto A = rounded<T>(randn((ta ? K : M) * lda, 23));
        const auto B = rounded<T>(randn((tb ? N : K) * ldb, 24));
        const auto C0 = rounded<T>(randn(M * ldc, 25));
        const auto bias = rounded<T>(randn(N, 26));
        std::vector<float> C = C0;
        kp::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), ldc,
                 with_bias ? bias.data() : nullptr);
        Dev<T> dA(A), dB(B), dC(C0), dbias(bias);
        kc::gemm<T>(gemm_ctx(), ta, tb, M, N, K, 0.5f, dA.p(), lda, dB.p(), ldb, 0.25f, dC.p(), ldc,
                    with_bias ? dbias.p() : nullptr, nullptr);
        EXPECT_CLOSE(dC.get(), C, tol<T>()) << "ta=" << ta << " tb=" << tb << " bias=" << with_bias;
      }
    }
  }
}

TYPED_TEST(CudaOps, BiasGrad) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t M = 1000, N = 77;
  const auto dout = rounded<T>(randn(M * N, 27));
  std::vector<float> db = randn(N, 28);
  const auto db0 = db;
  kp::bias_grad(dout.data(), M, N, db.data());
  Dev<T> ddout(dout);
  Dev<float> ddb(db0);
  Workspace ws(kc::bias_grad_workspace_bytes(M, N));
  kc::bias_grad(ddout.p(), M, N, ddb.p(), ws.p(), nullptr);
  EXPECT_CLOSE(ddb.get(), db, 1e-5);
}

// ---- attention --------------------------------------------------------------------------------

struct AttnCase {
  megatron::kernels::AttentionShape shape;
  bool causal;
  bool key_mask;
  float dropout;
};

template <typename T>
void check_attention(const AttnCase& c) {
  const megatron::kernels::AttentionShape& s = c.shape;
  const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
  const int64_t n_probs = s.B * s.H * s.S * s.S;
  const auto qkv = rounded<T>(randn(n_qkv, 29));
  const auto dout = rounded<T>(randn(n_out, 30));
  std::vector<uint8_t> mask(s.B * s.S, 1);
  for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
  for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // sample 1: a prefix
  megatron::kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(float(s.Dh));
  opt.causal = c.causal;
  opt.key_mask = c.key_mask ? mask.data() : nullptr;
  opt.dropout_p = c.dropout;
  opt.seed = 99;
  opt.stream = 5;
  std::vector<float> out(n_out), probs(n_probs), dqkv(n_qkv);
  kp::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
  kp::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());

  DevRaw<uint8_t> dmask(mask);
  megatron::kernels::AttentionOptions gopt = opt;
  gopt.key_mask = c.key_mask ? dmask.p() : nullptr;
  Dev<T> dqkv_in(qkv), dout_dev(dout), dres(n_out), ddqkv(n_qkv);
  Dev<float> dprobs(n_probs);
  Workspace wf(kc::attention_forward_workspace_bytes(s, sizeof(T)));
  Workspace wb(kc::attention_backward_workspace_bytes(s, sizeof(T)));
  kc::attention_forward(gemm_ctx(), s, gopt, dqkv_in.p(), dres.p(), dprobs.p(), wf.p(), nullptr);
  kc::attention_backward(gemm_ctx(), s, gopt, dqkv_in.p(), dprobs.p(), dout_dev.p(), ddqkv.p(),
                         wb.p(), nullptr);
  const auto gprobs = dprobs.get();
  EXPECT_CLOSE(gprobs, probs, 1e-4);
  int64_t zero_mismatch = 0;  // masked (and fully masked) entries are exactly 0 on both
  for (int64_t i = 0; i < n_probs; ++i) zero_mismatch += (gprobs[i] == 0.0f) != (probs[i] == 0.0f);
  EXPECT_EQ(zero_mismatch, 0);
  EXPECT_CLOSE(dres.get(), out, tol<T>());
  // Backward chains several roundings to T (dropped probs, dS): allow 3x the storage tolerance.
  EXPECT_CLOSE(ddqkv.get(), dqkv, 3 * tol<T>());
}

const AttnCase kAttnCases[] = {
    {{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f},   // GQA, causal, holes, dropout, offsets
    {{37, 2, 4, 4, 16}, false, false, 0.0f},          // plain MHA
    {{64, 1, 6, 2, 32}, true, false, 0.0f},           // causal GQA, no mask
    {{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f},  // MQA with padding and dropout
};

TYPED_TEST(CudaOps, AttentionUnfusedMatchesCpu) {
  REQUIRE_GPU();
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(::testing::Message()
                 << "S=" << c.shape.S << " H=" << c.shape.H << " G=" << c.shape.G
                 << " causal=" << c.causal << " mask=" << c.key_mask << " p=" << c.dropout);
    check_attention<TypeParam>(c);
  }
}

TEST(CudaKernels, FlashAttentionReportsWhatIsMissing) {
  // Host-only: the support query names the missing piece (no GPU needed).
  const megatron::kernels::AttentionShape s{128, 1, 4, 4, 64};
  megatron::kernels::AttentionOptions opt;
  opt.scale = 0.125f;
  opt.causal = true;
  const kc::FlashAttentionSupport support = kc::flash_attention_support(s, opt, DType::BF16);
  if (!support.supported) {
    EXPECT_NE(support.reason.find("cuDNN"), std::string::npos) << support.reason;
    GTEST_SKIP() << "fused attention unavailable: " << support.reason;
  }
}

TEST(CudaKernels, FlashAttentionMatchesUnfused) {
  REQUIRE_GPU();
  const megatron::kernels::AttentionShape s{128, 2, 4, 2, 64};
  megatron::kernels::AttentionOptions opt;
  opt.scale = 0.125f;
  opt.causal = true;
  const kc::FlashAttentionSupport support = kc::flash_attention_support(s, opt, DType::BF16);
  if (!support.supported) GTEST_SKIP() << support.reason;
  using T = __nv_bfloat16;
  const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
  const auto qkv = rounded<T>(randn(n_qkv, 31)), dout = rounded<T>(randn(n_out, 32));
  std::vector<float> out(n_out), probs(s.B * s.H * s.S * s.S), dqkv(n_qkv);
  kp::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
  kp::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
  Dev<T> dq(qkv), ddo(dout), dres(n_out), ddq(n_qkv);
  Dev<float> lse(s.B * s.H * s.S);
  Workspace ws(size_t(64) << 20);
  kc::flash_attention_forward(s, opt, dq.p(), dres.p(), lse.p(), ws.p(), nullptr);
  kc::flash_attention_backward(s, opt, dq.p(), dres.p(), lse.p(), ddo.p(), ddq.p(), ws.p(),
                               nullptr);
  EXPECT_CLOSE(dres.get(), out, tol<T>());
  EXPECT_CLOSE(ddq.get(), dqkv, 3 * tol<T>());
}

// ---- GEMM variants ------------------------------------------------------------------------------

TEST(CudaKernels, GemmBf16InputsIntoFp32OutputAccumulates) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int64_t M = 64, N = 48, K = 200;
  const auto A = rounded<T>(randn(K * M, 33)), B = rounded<T>(randn(K * N, 34));
  std::vector<float> C = randn(M * N, 35);
  const auto C0 = C;
  // dW += X^T dY: trans_a, fp32 main grad accumulation (beta = 1)
  kp::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, C.data(), N);
  Dev<T> dA(A), dB(B);
  Dev<float> dC(C0);
  kc::GemmArgs g;
  g.trans_a = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.beta = 1.0f;
  g.A = dA.p();
  g.lda = M;
  g.B = dB.p();
  g.ldb = N;
  g.C = dC.p();
  g.ldc = N;
  g.ab_type = DType::BF16;
  g.c_type = DType::F32;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(dC.get(), C, 1e-5);
}

TEST(CudaKernels, GemmStridedBatchedAndEmptyK) {
  REQUIRE_GPU();
  const int64_t M = 9, N = 11, K = 13, batch = 5;
  const auto A = randn(batch * M * K, 36), B = randn(batch * N * K, 37);
  std::vector<float> C(batch * M * N, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    kp::gemm(false, true, M, N, K, 1.0f, A.data() + b * M * K, K, B.data() + b * N * K, K, 0.0f,
             C.data() + b * M * N, N);
  Dev<float> dA(A), dB(B), dC(batch * M * N);
  kc::GemmArgs g;
  g.trans_b = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = dA.p();
  g.lda = K;
  g.stride_a = M * K;
  g.B = dB.p();
  g.ldb = K;
  g.stride_b = N * K;
  g.C = dC.p();
  g.ldc = N;
  g.stride_c = M * N;
  g.batch = batch;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(dC.get(), C, 1e-5);

  // K == 0: C = beta * C + bias, as the CPU gemm
  std::vector<float> C2 = randn(M * N, 38);
  const auto C20 = C2;
  const auto bias = randn(N, 39);
  kp::gemm(false, false, M, N, 0, 1.0f, A.data(), 1, B.data(), N, 0.5f, C2.data(), N, bias.data());
  Dev<float> dC2(C20), dbias(bias);
  kc::gemm<float>(gemm_ctx(), false, false, M, N, 0, 1.0f, dA.p(), 1, dB.p(), N, 0.5f, dC2.p(), N,
                  dbias.p(), nullptr);
  EXPECT_CLOSE(dC2.get(), C2, 1e-6);
}

template <typename T>
void check_gelu_epilogues() {
  // fc1 forward with GELU_AUX_BIAS, backward through DGELU: against the CPU gemm + gelu kernels.
  // cuBLASLt's GELU is its own tanh approximation: compare at 2e-3 (plus the storage rounding).
  const int64_t M = 64, N = 96, K = 80;
  const double t = std::max(2e-3, tol<T>());
  const auto X = rounded<T>(randn(M * K, 40)), W = rounded<T>(randn(N * K, 41, 0.2f));
  const auto bias = rounded<T>(randn(N, 42, 0.1f)), dY = rounded<T>(randn(M * N, 43));
  const auto W2 = rounded<T>(randn(N * N, 44, 0.2f));
  std::vector<float> pre(M * N), act(M * N);
  kp::gemm(false, true, M, N, K, 1.0f, X.data(), K, W.data(), K, 0.0f, pre.data(), N, bias.data());
  kp::gelu_forward(pre.data(), act.data(), M * N);
  Dev<T> dX(X), dW(W), dbias(bias), dact(M * N), daux(M * N);
  kc::GemmArgs g;
  g.trans_b = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = dX.p();
  g.lda = K;
  g.B = dW.p();
  g.ldb = K;
  g.C = dact.p();
  g.ldc = N;
  g.ab_type = g.c_type = dtype_of<T>();
  g.epilogue = kc::GemmEpilogue::BiasGeluAux;
  g.bias = dbias.p();
  g.aux = daux.p();
  g.ld_aux = N;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(daux.get(), pre, tol<T>());
  EXPECT_CLOSE(dact.get(), act, t);

  // d(pre) = (dY W2) * gelu'(pre), with pre from aux
  std::vector<float> dact_ref(M * N), dpre(M * N);
  kp::gemm(false, false, M, N, N, 1.0f, dY.data(), N, W2.data(), N, 0.0f, dact_ref.data(), N);
  const auto pre_r = rounded<T>(pre);
  kp::gelu_backward(pre_r.data(), dact_ref.data(), dpre.data(), M * N);
  Dev<T> ddY(dY), dW2(W2), ddpre(M * N);
  kc::GemmArgs b;
  b.M = M;
  b.N = N;
  b.K = N;
  b.A = ddY.p();
  b.lda = N;
  b.B = dW2.p();
  b.ldb = N;
  b.C = ddpre.p();
  b.ldc = N;
  b.ab_type = b.c_type = dtype_of<T>();
  b.epilogue = kc::GemmEpilogue::DGelu;
  b.aux = daux.p();
  b.ld_aux = N;
  gemm_ctx().run(b, nullptr);
  EXPECT_CLOSE(ddpre.get(), dpre, t);
}

TEST(CudaKernels, GemmGeluEpiloguesBf16) {
  REQUIRE_GPU();
  check_gelu_epilogues<__nv_bfloat16>();
}

TEST(CudaKernels, GemmGeluEpiloguesFp16) {
  REQUIRE_GPU();
  check_gelu_epilogues<__half>();
}

// ---- optimizer ---------------------------------------------------------------------------------

TEST(CudaKernels, MultiTensorAdamWMatchesCpu) {
  REQUIRE_GPU();
  // 30 tensors (more than one launch's table), one spanning several 64 Ki chunks.
  std::vector<int64_t> sizes;
  for (int i = 0; i < 29; ++i) sizes.push_back(1 + 37 * i);
  sizes.push_back(300001);
  math::AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f, 0.0f};
  std::vector<std::vector<float> > param, grad, m, v;
  for (size_t t = 0; t < sizes.size(); ++t) {
    param.push_back(randn(sizes[t], 100 + t));
    grad.push_back(randn(sizes[t], 200 + t, 0.1f));
    m.push_back(std::vector<float>(sizes[t], 0.0f));
    v.push_back(std::vector<float>(sizes[t], 0.0f));
  }
  std::vector<std::unique_ptr<Dev<float> > > dp, dg, dm, dv;
  std::vector<std::unique_ptr<Dev<__nv_bfloat16> > > dcopy;
  std::vector<kc::AdamWTensor> list;
  for (size_t t = 0; t < sizes.size(); ++t) {
    dp.push_back(std::make_unique<Dev<float> >(param[t]));
    dg.push_back(std::make_unique<Dev<float> >(grad[t]));
    dm.push_back(std::make_unique<Dev<float> >(m[t]));
    dv.push_back(std::make_unique<Dev<float> >(v[t]));
    dcopy.push_back(std::make_unique<Dev<__nv_bfloat16> >(sizes[t]));
    kc::AdamWTensor a{dp[t]->p(), dg[t]->p(), dm[t]->p(), dv[t]->p(), sizes[t]};
    a.wd_mult = t % 3 == 0 ? 0.0f : 1.0f;
    a.param_bf16 = dcopy[t]->p();
    list.push_back(a);
  }
  for (int step = 1; step <= 3; ++step) {
    p.bias_correction1 = 1.0f - std::pow(p.beta1, float(step));
    p.bias_correction2 = 1.0f - std::pow(p.beta2, float(step));
    for (size_t t = 0; t < sizes.size(); ++t) {
      math::AdamWParams pt = p;
      pt.weight_decay = t % 3 == 0 ? 0.0f : p.weight_decay;
      kp::adamw_step(param[t].data(), grad[t].data(), m[t].data(), v[t].data(), sizes[t], pt);
    }
    kc::multi_tensor_adamw(list, p, 1.0f, nullptr);
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    const auto got = dp[t]->get();
    EXPECT_CLOSE(got, param[t], 1e-5) << "tensor " << t;
    EXPECT_CLOSE(dm[t]->get(), m[t], 1e-5) << "tensor " << t;
    EXPECT_CLOSE(dv[t]->get(), v[t], 1e-5) << "tensor " << t;
    EXPECT_EQ(dcopy[t]->get(), rounded<__nv_bfloat16>(got)) << "tensor " << t;
  }
}

TEST(CudaKernels, SumSquaresIsDeterministicAndMatchesCpu) {
  REQUIRE_GPU();
  const std::vector<int64_t> sizes{0, 1, 1000, 1 << 20, 77777};
  std::vector<std::vector<float> > host;
  std::vector<std::unique_ptr<Dev<float> > > dev;
  std::vector<const float*> ptrs;
  double want = 0.0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    host.push_back(randn(sizes[t], 300 + t));
    want += kp::sum_squares(host[t].data(), sizes[t]);
    dev.push_back(std::make_unique<Dev<float> >(host[t]));
    ptrs.push_back(dev[t]->p());
  }
  Workspace ws(kc::sum_squares_workspace_bytes(int(sizes.size())));
  DevRaw<double> out(1);
  kc::multi_tensor_sum_squares<float>(ptrs, sizes, out.p(), ws.p(), nullptr);
  const double got = out.get()[0];
  EXPECT_NEAR(got, want, 1e-12 * want);
  kc::multi_tensor_sum_squares<float>(ptrs, sizes, out.p(), ws.p(), nullptr);
  EXPECT_EQ(out.get()[0], got) << "same bits every run";
  kc::sum_squares<float>(ptrs[3], sizes[3], out.p(), ws.p(), nullptr);
  EXPECT_NEAR(out.get()[0], kp::sum_squares(host[3].data(), sizes[3]), 1e-12 * want);
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
