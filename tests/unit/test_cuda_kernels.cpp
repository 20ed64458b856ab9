// Every CUDA kernel against the CPU kernel on the same inputs (rounded to the storage type
// first, so only the kernels' own error is measured), for each storage type: fp32, bf16, fp16.
// Errors are norm-relative (max |gpu - cpu| / max |cpu|) with per-dtype tolerances; dropout
// masks must be bit-identical to the CPU's, and the fp32 embedding gradient bit-identical too.
// Here: elementwise ops, casts, dropout, softmax, norms, embedding, RoPE, cross entropy and the
// optimizer; GEMMs and attention: test_cuda_kernels_gemm_attention.cpp.
// Without a CUDA build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/softmax.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaKernels, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
namespace math = megatron::math;
using kc::testing::CudaOps;
using kc::testing::Dev;
using kc::testing::DevRaw;
using kc::testing::randn;
using kc::testing::round_to;
using kc::testing::rounded;
using kc::testing::StorageNames;
using kc::testing::StorageTypes;
using kc::testing::tol;
using kc::testing::Workspace;

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

  for (const math::Gelu kind : {math::Gelu::Tanh, math::Gelu::Erf}) {
    kp::gelu_forward(a.data(), ref.data(), n, kind);
    kc::gelu_forward(da.p(), dout.p(), n, kind, nullptr);
    EXPECT_CLOSE(dout.get(), ref, tol<T>());
    kp::gelu_backward(a.data(), b.data(), ref.data(), n, kind);
    kc::gelu_backward(da.p(), db.p(), dout.p(), n, kind, nullptr);
    EXPECT_CLOSE(dout.get(), ref, tol<T>());
  }

  // One element off the 8-element grouping: the element-by-element kernels (the grouped ones
  // above need group-aligned pointers; n = 100003 also left them a tail).
  const int64_t m = n - 1;
  std::vector<float> ref1(m);
  auto head = [m](std::vector<float> v) {
    v.resize(m);
    return v;
  };
  kp::add(a.data() + 1, b.data() + 1, ref1.data(), m);
  kc::add(da.p() + 1, db.p() + 1, dout.p(), m, nullptr);
  EXPECT_CLOSE(head(dout.get()), ref1, tol<T>());
  kp::gelu_backward(a.data() + 1, b.data() + 1, ref1.data(), m, math::Gelu::Tanh);
  kc::gelu_backward(da.p() + 1, db.p() + 1, dout.p(), m, math::Gelu::Tanh, nullptr);
  EXPECT_CLOSE(head(dout.get()), ref1, tol<T>());

  const auto x = rounded<T>(randn(rows * 2 * F, 3, 2.0f)), dy = rounded<T>(randn(rows * F, 4));
  std::vector<float> y(rows * F), dx(rows * 2 * F);
  Dev<T> dx_in(x), ddy(dy), dy_out(rows * F), ddx(rows * 2 * F);
  // GPT-OSS's unit clamps at 7 with an offset of 1; at limit 1.5 about a third of the N(0, 2)
  // inputs fall outside the clamps, so the gradients' pass-through masks are exercised.
  const math::Glu glus[] = {math::GluGate::Silu,
                            math::GluGate::GeluTanh,
                            math::GluGate::QuickGelu,
                            math::Glu(math::GluGate::QuickGelu, 7.0f, 1.0f),
                            math::Glu(math::GluGate::QuickGelu, 1.5f, 1.0f),
                            math::Glu(math::GluGate::Silu, 0.0f, 0.5f)};
  for (const math::Glu& glu : glus) {
    SCOPED_TRACE(::testing::Message()
                 << "gate " << int(glu.gate) << " limit " << glu.limit << " offset " << glu.offset);
    kp::glu_forward(x.data(), y.data(), rows, F, glu);
    kc::glu_forward(dx_in.p(), dy_out.p(), rows, F, glu, nullptr);
    EXPECT_CLOSE(dy_out.get(), y, tol<T>());
    kp::glu_backward(x.data(), dy.data(), dx.data(), rows, F, glu);
    kc::glu_backward(dx_in.p(), ddy.p(), ddx.p(), rows, F, glu, nullptr);
    EXPECT_CLOSE(ddx.get(), dx, tol<T>());
  }
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
  kc::rope_forward(s, dfwd.p(), 10000.0f, 4000, nullptr, nullptr);
  kc::rope_backward(s, dbwd.p(), 10000.0f, 4000, nullptr, nullptr);
  EXPECT_CLOSE(dfwd.get(), fwd, tol<T>());
  EXPECT_CLOSE(dbwd.get(), bwd, tol<T>());
  // LongRoPE's per-pair factors (host memory: the CUDA path turns them into frequencies on the
  // host; a device pointer here once crashed generate on a Phi-3 checkpoint), partial rotary.
  const std::vector<float> factors{1.0f, 1.5f, 2.0f, 3.5f, 4.0f, 6.0f, 7.5f, 9.0f};
  megatron::math::RopeFrequencies rope(10000.0f);
  rope.pair_factor = factors.data();
  rope.rotary_dims = 16;
  rope.attention_scale = 1.2f;
  std::vector<float> lr = qkv;
  kp::rope_forward(s, lr.data(), rope, 77);
  Dev<T> dlr(qkv);
  kc::rope_forward(s, dlr.p(), rope, 77, nullptr, nullptr);
  EXPECT_CLOSE(dlr.get(), lr, tol<T>());
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
