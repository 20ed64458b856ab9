// The ops of megatron/backend/ops.h through both backends: every case below builds its inputs
// once, runs the SAME code through ops:: on CPU tensors (fp32) and on CUDA tensors (copied over
// with Tensor::to, in fp32, bf16 and fp16), and compares the CUDA outputs with the CPU ones by
// norm-relative error (max |cuda - cpu| / max |cpu|) with per-dtype tolerances. Inputs are
// rounded to the tested dtype first, so only the kernels' own error is measured.
// Without a CUDA build or a GPU these cases compute the CPU side, then report SKIPPED.
//
// Attention and flash attention: test_ops_backends_attention.cpp. Rejection of tensors on the
// wrong or on mixed devices, and Tensor's device plumbing: test_ops_backends_device.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/backend/ops.h"
#include "megatron/core/tensor.h"
#include "tests/support/ops_test_util.h"

namespace megatron {
namespace {

using ops::testing::Backend;
using ops::testing::CudaVsCpuOps;
using ops::testing::dtype_param_name;
using ops::testing::host_tensor;
using ops::testing::Outputs;
using ops::testing::randn;
using ops::testing::rel_error;
using ops::testing::round_to;
using ops::testing::values;

TEST_P(CudaVsCpuOps, Linear) {
  const int64_t n = 15, in = 32, out = 48;
  const auto x = rnd(n * in, 1), w = rnd(out * in, 2, 0.2f), b = rnd(out, 3), dy = rnd(n * out, 4);
  const auto dw0 = randn(out * in, 5), db0 = randn(out, 6);  // fp32 main grads: accumulated
  compare(
      [&](const Backend& be) {
        Tensor tx = be.make(x, {3, 5, in}), tw = be.make(w, {out, in}), tb = be.make(b, {out});
        Tensor y = be.act_zeros({3, 5, out}), y_nb = be.act_zeros({n, out});
        ops::linear_forward(tx, tw, &tb, y);
        ops::linear_forward(tx, tw, nullptr, y_nb);
        Tensor tdy = be.make(dy, {n, out}), dx = be.act_zeros({n, in});
        Tensor dw = be.f32(dw0, {out, in}), db = be.f32(db0, {out});
        ops::linear_backward(tx, tw, tdy, &dx, &dw, &db);
        Tensor dw_only = be.zeros({out, in}, DType::F32);
        ops::linear_backward(tx, tw, tdy, nullptr, &dw_only, nullptr);
        return Outputs{{"y", y},   {"y_nobias", y_nb}, {"dx", dx},
                       {"dw", dw}, {"db", db},         {"dw_only", dw_only}};
      },
      {{"dw", 2.0}, {"dw_only", 2.0}});
}

// Leading dimensions and alignments cuBLASLt may refuse (the classic cuBLAS fallback).
TEST_P(CudaVsCpuOps, LinearOddShapes) {
  const int64_t n = 7, in = 13, out = 11;
  const auto x = rnd(n * in, 11), w = rnd(out * in, 12, 0.3f), b = rnd(out, 13),
             dy = rnd(n * out, 14);
  compare([&](const Backend& be) {
    Tensor tx = be.make(x, {n, in}), tw = be.make(w, {out, in}), tb = be.make(b, {out});
    Tensor y = be.act_zeros({n, out});
    ops::linear_forward(tx, tw, &tb, y);
    Tensor tdy = be.make(dy, {n, out}), dx = be.act_zeros({n, in});
    Tensor dw = be.zeros({out, in}, DType::F32), db = be.zeros({out}, DType::F32);
    ops::linear_backward(tx, tw, tdy, &dx, &dw, &db);
    return Outputs{{"y", y}, {"dx", dx}, {"dw", dw}, {"db", db}};
  });
}

// Norm weights in the activations' dtype or in fp32 (bf16/fp16 activations with fp32 params).
class CudaVsCpuNorms : public CudaVsCpuOps {
 protected:
  void run_norms(bool fp32_weights) {
    const int64_t rows = 7, d = 64;
    const auto x = rnd(rows * d, 21, 2.0f), w = rnd(d, 22, 0.5f), b = rnd(d, 23),
               dy = rnd(rows * d, 24);
    compare(
        [&](const Backend& be) {
          const DType wt = fp32_weights ? DType::F32 : be.dtype;
          Tensor tx = be.make(x, {rows, d}), tw = be.make_as(w, {d}, wt),
                 tb = be.make_as(b, {d}, wt), tdy = be.make(dy, {rows, d});
          Tensor y = be.act_zeros({rows, d}), mean = be.zeros({rows}, DType::F32),
                 rstd = be.zeros({rows}, DType::F32);
          ops::layernorm_forward(tx, tw, tb, 1e-5f, y, mean, rstd);
          Tensor dx = be.act_zeros({rows, d}), dw = be.zeros({d}, DType::F32),
                 db = be.zeros({d}, DType::F32);
          ops::layernorm_backward(tx, tw, mean, rstd, tdy, dx, dw, db);
          ops::layernorm_backward(tx, tw, mean, rstd, tdy, dx, dw, db);  // dw, db accumulate
          Tensor ry = be.act_zeros({rows, d}), rrstd = be.zeros({rows}, DType::F32);
          ops::rmsnorm_forward(tx, tw, 1e-6f, ry, rrstd);
          Tensor rdx = be.act_zeros({rows, d}), rdw = be.zeros({d}, DType::F32);
          ops::rmsnorm_backward(tx, tw, rrstd, tdy, rdx, rdw);
          return Outputs{{"ln_y", y},     {"ln_mean", mean}, {"ln_rstd", rstd}, {"ln_dx", dx},
                         {"ln_dw", dw},   {"ln_db", db},     {"rms_y", ry},     {"rms_rstd", rrstd},
                         {"rms_dx", rdx}, {"rms_dw", rdw}};
        },
        {{"ln_dx", 2.0}, {"rms_dx", 2.0}});
  }
};

TEST_P(CudaVsCpuNorms, WeightsInActivationDtype) { run_norms(false); }
TEST_P(CudaVsCpuNorms, Fp32Weights) { run_norms(true); }

TEST_P(CudaVsCpuOps, GeluAndSwiglu) {
  const int64_t rows = 9, f = 24;
  const auto x = rnd(rows * 2 * f, 31, 2.0f), dy = rnd(rows * 2 * f, 32), dys = rnd(rows * f, 33);
  compare([&](const Backend& be) {
    Tensor tx = be.make(x, {rows, 2 * f}), tdy = be.make(dy, {rows, 2 * f});
    Tensor y = be.act_zeros({rows, 2 * f}), dx = be.act_zeros({rows, 2 * f});
    ops::gelu_forward(tx, y);
    ops::gelu_backward(tx, tdy, dx);
    Tensor sy = be.act_zeros({rows, f}), sdx = be.act_zeros({rows, 2 * f});
    ops::glu_forward(tx, sy);
    ops::glu_backward(tx, be.make(dys, {rows, f}), sdx);
    return Outputs{{"gelu_y", y}, {"gelu_dx", dx}, {"swiglu_y", sy}, {"swiglu_dx", sdx}};
  });
}

TEST_P(CudaVsCpuOps, Tanh) {
  const int64_t rows = 5, d = 24;
  const auto x = rnd(rows * d, 34, 2.0f), dy = rnd(rows * d, 35);
  compare([&](const Backend& be) {
    Tensor tx = be.make(x, {rows, d});
    Tensor y = be.act_zeros({rows, d}), dx = be.make(dy, {rows, d});
    ops::tanh_forward(tx, y);
    ops::tanh_backward(y, dx, dx);  // in place, as the BERT pooler does
    return Outputs{{"tanh_y", y}, {"tanh_dx", dx}};
  });
}

TEST_P(CudaVsCpuOps, Embedding) {
  const int64_t rows = 20, d = 16, start = 5;
  // In range, repeated, and outside this shard's rows [5, 25) (zero rows, no gradient).
  const std::vector<int32_t> ids = {5, 7, 7, 24, 0, 30, 12, 12, 12, 6, 25, 4};
  const auto table = rnd(rows * d, 41), dout = rnd(ids.size() * d, 42);
  const auto dtable0 = randn(rows * d, 43);
  compare([&](const Backend& be) {
    Tensor tids = be.ints(ids), ttable = be.make(table, {rows, d});
    Tensor out = be.act_zeros({static_cast<int64_t>(ids.size()), d});
    ops::embedding_forward(tids, ttable, start, out);
    Tensor dtable = be.f32(dtable0, {rows, d});
    ops::embedding_backward(tids, be.make(dout, {static_cast<int64_t>(ids.size()), d}), start,
                            dtable);
    return Outputs{{"out", out}, {"dtable", dtable}};
  });
}

TEST_P(CudaVsCpuOps, Rope) {
  const kernels::AttentionShape s{11, 2, 4, 2, 32};
  const int64_t n = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh;
  const auto qkv = rnd(n, 61), dqkv = rnd(n, 62);
  compare([&](const Backend& be) {
    Tensor a = be.make(qkv, {n}), b = be.make(dqkv, {n});
    ops::rope_forward(s, a, 10000.0f, 3);
    ops::rope_backward(s, b, 500000.0f, 7);
    return Outputs{{"qkv", a}, {"dqkv", b}};
  });
}

// Partial rotary embeddings (model.rotary_percent): the first 24 of 32 dims turn.
TEST_P(CudaVsCpuOps, RopePartialRotary) {
  const kernels::AttentionShape s{11, 2, 4, 2, 32};
  const int64_t n = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh;
  const auto qkv = rnd(n, 65), dqkv = rnd(n, 66);
  math::RopeFrequencies f(10000.0f);
  f.rotary_dims = 24;
  compare([&](const Backend& be) {
    Tensor a = be.make(qkv, {n}), b = be.make(dqkv, {n});
    ops::rope_forward(s, a, f, 3);
    ops::rope_backward(s, b, f, 7);
    return Outputs{{"qkv", a}, {"dqkv", b}};
  });
}

// Per-token positions (packed documents restart at 0), [S, B] int32 on the run's device.
TEST_P(CudaVsCpuOps, RopeAtPackedPositions) {
  const kernels::AttentionShape s{11, 2, 4, 2, 32};
  const int64_t n = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh;
  const auto qkv = rnd(n, 63), dqkv = rnd(n, 64);
  std::vector<int32_t> pos(s.S * s.B);
  for (int64_t t = 0; t < s.S; ++t)
    for (int64_t b = 0; b < s.B; ++b) pos[t * s.B + b] = static_cast<int32_t>(t % (4 + b));
  compare([&](const Backend& be) {
    Tensor a = be.make(qkv, {n}), b = be.make(dqkv, {n});
    const Tensor tpos = be.ints(pos).view({s.S, s.B});
    ops::rope_forward(s, a, 10000.0f, 0, &tpos);
    ops::rope_backward(s, b, 500000.0f, 0, &tpos);
    return Outputs{{"qkv", a}, {"dqkv", b}};
  });
}

TEST_P(CudaVsCpuOps, DropoutSameMasks) {
  const int64_t n = 4099;
  const auto x = rnd(n, 71), dy = rnd(n, 72);
  Outputs cpu_side;
  compare([&](const Backend& be) {
    Tensor y = be.act_zeros({n}), dx = be.act_zeros({n});
    ops::dropout_forward(be.make(x, {n}), y, 0.3f, 42, 7, 123);
    ops::dropout_backward(be.make(dy, {n}), dx, 0.3f, 42, 7, 123);
    Outputs o{{"y", y}, {"dx", dx}};
    if (be.device == Device::CPU) cpu_side = o;
    return o;
  });
  if (!device_available(Device::CUDA)) return;
  // Bit-identical masks: the dropped elements are exactly the same.
  Tensor y = Tensor::zeros({n}, dt(), Device::CUDA);
  ops::dropout_forward(host_tensor(x, {n}, dt()).to(Device::CUDA), y, 0.3f, 42, 7, 123);
  const auto gpu = values(y), cpu = values(cpu_side[0].second);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mismatches += (gpu[i] == 0.0f) != (cpu[i] == 0.0f);
  EXPECT_EQ(mismatches, 0);
}

// [S, B, D] rows at their global Philox indices (a sequence slice of a later micro-batch),
// out of place and in place; D = 10 starts rows mid Philox block.
TEST_P(CudaVsCpuOps, DropoutRowsSameMasks) {
  const kernels::DropoutRows rows{4, 3, 10, 5, 4, 12};
  const int64_t n = rows.S * rows.B * rows.D;
  const auto x = rnd(n, 73);
  compare([&](const Backend& be) {
    Tensor y = be.act_zeros({rows.S, rows.B, rows.D}), z = be.make(x, {rows.S, rows.B, rows.D});
    ops::dropout_rows(be.make(x, {rows.S, rows.B, rows.D}), y, rows, 0.3f, 42, 7);
    ops::dropout_rows(z, z, rows, 0.3f, 42, 7);
    return Outputs{{"y", y}, {"in_place", z}};
  });
}

TEST_P(CudaVsCpuOps, Fill) {
  compare([&](const Backend& be) {
    Tensor a = be.act_zeros({3, 7}), b = be.zeros({5}, DType::F32);
    ops::fill(a, -1.375f);
    ops::fill(b, 0.1f);
    return Outputs{{"activation_dtype", a}, {"fp32", b}};
  });
}

TEST_P(CudaVsCpuOps, CrossEntropy) {
  const int64_t n = 10, v = 50;
  const auto logits = rnd(n * v, 81, 3.0f), dloss = rnd(n, 82);
  // Whole vocabulary (3 padding columns) and the second half of a vocab-parallel split.
  const kernels::VocabSlice whole{v, 0, 47}, shard{v, 50, 97};
  const std::vector<int32_t> targets = {0, 46, 3, -100, 20, 20, 9, 33, 1, 45};
  const std::vector<int32_t> shard_targets = {50, 96, 3, -100, 70, 20, 59, 83, 1, 45};
  compare([&](const Backend& be) {
    Outputs o;
    int i = 0;
    for (const auto& [vs, tg] : {std::pair{whole, targets}, std::pair{shard, shard_targets}}) {
      const std::string tag = i++ ? "shard_" : "whole_";
      Tensor tl = be.make(logits, {n, v}), tt = be.ints(tg);
      Tensor loss = be.zeros({n}, DType::F32), lse = be.zeros({n}, DType::F32);
      ops::cross_entropy_forward(tl, tt, vs, -100, loss, lse);
      Tensor dlogits = be.act_zeros({n, v});
      ops::cross_entropy_backward(tl, tt, vs, -100, lse, be.f32(dloss, {n}), dlogits);
      // The same statistics in pieces (what a vocab-parallel caller all-reduces in between).
      Tensor row_max = be.zeros({n}, DType::F32), sum_exp = be.zeros({n}, DType::F32),
             target = be.zeros({n}, DType::F32), loss2 = be.zeros({n}, DType::F32),
             lse2 = be.zeros({n}, DType::F32);
      ops::cross_entropy_row_max(tl, vs, row_max);
      ops::cross_entropy_sum_exp(tl, tt, vs, row_max, sum_exp, target);
      ops::cross_entropy_loss(tt, -100, row_max, sum_exp, target, loss2, lse2);
      if (be.device == Device::CPU) {  // one device: the pieces give the fused results
        EXPECT_LE(rel_error(values(loss2), values(loss)), 1e-6) << tag;
        EXPECT_LE(rel_error(values(lse2), values(lse)), 1e-6) << tag;
      }
      o.insert(o.end(), {{tag + "loss", loss},
                         {tag + "lse", lse},
                         {tag + "dlogits", dlogits},
                         {tag + "row_max", row_max},
                         {tag + "sum_exp", sum_exp},
                         {tag + "target_logit", target},
                         {tag + "pieces_loss", loss2},
                         {tag + "pieces_lse", lse2}});
    }
    return o;
  });
}

TEST_P(CudaVsCpuOps, Elementwise) {
  const int64_t rows = 6, n = 24;
  const auto a = rnd(rows * n, 91), b = rnd(rows * n, 92), bias = rnd(n, 93);
  const auto acc0 = randn(rows * n, 94);
  compare([&](const Backend& be) {
    Tensor ta = be.make(a, {rows, n}), tb = be.make(b, {rows, n});
    Tensor sum = be.act_zeros({rows, n});
    ops::add(ta, tb, sum);
    Tensor biased = be.make(a, {rows, n});
    ops::add_bias(biased, be.make(bias, {n}));
    Tensor acc = be.make(a, {rows, n});
    ops::add_inplace(acc, tb);
    Tensor acc32 = be.f32(acc0, {rows * n});  // fp32 accumulator, x in the run's dtype
    ops::add_inplace(acc32, tb);
    Tensor scaled = be.make(a, {rows, n});
    ops::scale_inplace(scaled, -0.75f);
    return Outputs{{"add", sum},
                   {"add_bias", biased},
                   {"add_inplace", acc},
                   {"add_inplace_fp32_acc", acc32},
                   {"scale", scaled}};
  });
}

// Casts round to nearest even on both devices: bit-identical results, both directions.
TEST_P(CudaVsCpuOps, CastIsBitIdentical) {
  const int64_t n = 5003;
  std::vector<float> x = randn(n, 121, 10.0f);
  x[0] = 1.0f + 1.0f / 256;  // a bf16 tie (rounds to even)
  x[1] = 70000.0f;           // beyond fp16: +inf
  x[2] = 1e-6f;              // an fp16 subnormal
  // On the CPU: fp32 -> dtype -> fp32 equals the math:: rounding.
  Tensor h = host_tensor(x, {n}, DType::F32), low = Tensor::empty({n}, dt()),
         back = Tensor::empty({n}, DType::F32);
  ops::cast(h, low);
  ops::cast(low, back);
  const auto got = values(back);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], round_to(dt(), x[i])) << i;
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  Tensor dlow = Tensor::empty({n}, dt(), Device::CUDA);
  Tensor dback = Tensor::empty({n}, DType::F32, Device::CUDA);
  ops::cast(h.to(Device::CUDA), dlow);
  ops::cast(dlow, dback);
  const Tensor lowh = dlow.to(Device::CPU);
  EXPECT_EQ(std::memcmp(lowh.raw(), low.raw(), low.nbytes()), 0);
  const Tensor backh = dback.to(Device::CPU);
  EXPECT_EQ(std::memcmp(backh.raw(), back.raw(), back.nbytes()), 0);
  // fp32 -> 16-bit -> the other 16-bit type.
  const DType other = dt() == DType::BF16 ? DType::F16 : DType::BF16;
  Tensor o_cpu = Tensor::empty({n}, other), o_gpu = Tensor::empty({n}, other, Device::CUDA);
  ops::cast(low, o_cpu);
  ops::cast(dlow, o_gpu);
  EXPECT_EQ(std::memcmp(o_gpu.to(Device::CPU).raw(), o_cpu.raw(), o_cpu.nbytes()), 0);
}

TEST_P(CudaVsCpuOps, SumSquares) {
  const auto x = rnd(12345, 101, 2.0f);
  double cpu = 0.0;
  compare([&](const Backend& be) {
    const double s = ops::sum_squares(be.make(x, {12345}));
    if (be.device == Device::CPU) cpu = s;
    if (be.device == Device::CUDA) {
      EXPECT_NEAR(s, cpu, 1e-6 * cpu);  // double accumulation of the same values on both
      EXPECT_EQ(ops::sum_squares(be.make(std::vector<float>{}, Shape{0})), 0.0);
    }
    return Outputs{};
  });
}

// AdamW updates fp32 master weights only: instantiated for fp32 alone.
class CudaVsCpuFp32Ops : public CudaVsCpuOps {};

TEST_P(CudaVsCpuFp32Ops, AdamW) {
  const int64_t n = 70001;
  const auto p0 = randn(n, 111), g = randn(n, 112, 0.1f), m0 = randn(n, 113, 0.01f);
  auto v0 = randn(n, 114, 0.001f);
  for (float& x : v0) x = std::abs(x);
  const math::AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f * 0.9f, 1 - 0.95f * 0.95f};
  compare([&](const Backend& be) {
    Tensor param = be.f32(p0, {n}), grad = be.f32(g, {n}), m = be.f32(m0, {n}), v = be.f32(v0, {n});
    ops::adamw_step(param, grad, m, v, p);
    ops::adamw_step(param, grad, m, v, p);
    return Outputs{{"param", param}, {"m", m}, {"v", v}};
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuOps,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuNorms,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuFp32Ops, ::testing::Values(DType::F32), dtype_param_name);

}  // namespace
}  // namespace megatron
