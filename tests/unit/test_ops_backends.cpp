// The ops of megatron/backend/ops.h through both backends: every case below builds its inputs
// once, runs the SAME code through ops:: on CPU tensors (fp32) and on CUDA tensors (copied over
// with Tensor::to, in fp32, bf16 and fp16), and compares the CUDA outputs with the CPU ones by
// norm-relative error (max |cuda - cpu| / max |cpu|) with per-dtype tolerances. Inputs are
// rounded to the tested dtype first, so only the kernels' own error is measured.
// Without a CUDA build or a GPU these cases compute the CPU side, then report SKIPPED.
//
// Also here, and run everywhere: how tensors on the wrong or on mixed devices are rejected, and
// Tensor's device plumbing (allocation, copies, to(), zero_, memory stats) driven through a fake
// device memory backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/backend/ops.h"
#include "megatron/core/device_memory.h"
#include "megatron/core/tensor.h"

namespace megatron {

// Test names and messages print the dtype's name ("bf16"), not its byte.
void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }

namespace {

using ::testing::HasSubstr;
namespace kp = kernels::cpu;

// ---- values and tensors --------------------------------------------------------------------

float round_to(DType t, float x) {
  switch (t) {
    case DType::BF16:
      return math::bf16_bits_to_float(math::float_to_bf16_bits(x));
    case DType::F16:
      return math::fp16_bits_to_float(math::float_to_fp16_bits(x));
    default:
      return x;
  }
}

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A host tensor of `dtype` holding `v` (rounded to nearest even for bf16/fp16).
Tensor host_tensor(const std::vector<float>& v, const Shape& shape, DType dtype) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel());
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::F32:
        t.data<float>()[i] = v[i];
        break;
      case DType::BF16:
        t.data<bf16_t>()[i].bits = math::float_to_bf16_bits(v[i]);
        break;
      case DType::F16:
        t.data<fp16_t>()[i].bits = math::float_to_fp16_bits(v[i]);
        break;
      default:
        ADD_FAILURE() << "host_tensor: unsupported dtype " << dtype_name(dtype);
    }
  }
  return t;
}

// Any float tensor, on any device, as floats.
std::vector<float> values(const Tensor& t) {
  const Tensor h = t.to(Device::CPU);
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (h.dtype()) {
      case DType::F32:
        v[i] = h.data<float>()[i];
        break;
      case DType::BF16:
        v[i] = math::bf16_bits_to_float(h.data<bf16_t>()[i].bits);
        break;
      case DType::F16:
        v[i] = math::fp16_bits_to_float(h.data<fp16_t>()[i].bits);
        break;
      default:
        ADD_FAILURE() << "values: unsupported dtype " << dtype_name(h.dtype());
    }
  }
  return v;
}

// max |a - b| / max |b| (b: the CPU reference); NaN where only one side has one is infinite.
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

// Per-dtype tolerances for one rounding of the result to the storage type plus the kernels' own
// differences (fp32 accumulation order, library GEMMs, sin/cos/exp ulps).
double tolerance(DType t) {
  switch (t) {
    case DType::BF16:
      return 1e-2;
    case DType::F16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// The device and dtype one run of a case uses: the CPU reference runs in fp32; the CUDA run in
// the tested dtype. Tensors of a case are made through it, so both runs execute the same code.
struct Backend {
  Device device;
  DType dtype;  // the storage type of activations and parameters

  // `v` rounded to the tested dtype (done by the caller), stored as `dtype` (default: the
  // run's activation dtype) on the run's device.
  Tensor make(const std::vector<float>& v, const Shape& shape) const {
    return make_as(v, shape, dtype);
  }
  Tensor make_as(const std::vector<float>& v, const Shape& shape, DType t) const {
    return host_tensor(v, shape, t).to(device);
  }
  Tensor f32(const std::vector<float>& v, const Shape& shape) const {
    return make_as(v, shape, DType::F32);
  }
  Tensor zeros(const Shape& shape, DType t) const { return Tensor::zeros(shape, t, device); }
  Tensor act_zeros(const Shape& shape) const { return zeros(shape, dtype); }
  Tensor ints(const std::vector<int32_t>& v) const {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
    std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
    return t.to(device);
  }
  Tensor bytes(const std::vector<uint8_t>& v) const {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::U8);
    std::memcpy(t.raw(), v.data(), v.size());
    return t.to(device);
  }
};

// Named outputs of one run (any device, any float dtype).
using Outputs = std::vector<std::pair<std::string, Tensor>>;

class CudaVsCpuOps : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  std::vector<float> rnd(size_t n, uint32_t seed, float sd = 1.0f) const {
    std::vector<float> v = randn(n, seed, sd);
    for (float& x : v) x = round_to(dt(), x);
    return v;
  }

  // Runs `run` on the CPU (fp32), then on the CPU in dt() (16-bit tensors: the contract of
  // backend/float_args.h, widened kernels, rounded outputs), then, when a GPU is there, on CUDA
  // in dt(), and compares every output of the last two with the fp32 CPU ones. `slack`
  // multiplies the dtype's tolerance for the outputs it names (chains of roundings); `fixed`
  // replaces it (fp32 outputs computed from exactly the same inputs).
  void compare(const std::function<Outputs(const Backend&)>& run,
               const std::map<std::string, double>& slack = {},
               const std::map<std::string, double>& fixed = {}) {
    const Outputs cpu = run(Backend{Device::CPU, DType::F32});
    for (const auto& [name, t] : cpu) {
      ASSERT_EQ(t.device(), Device::CPU) << name;
      for (float x : values(t)) ASSERT_TRUE(std::isfinite(x)) << name << " has a non-finite value";
    }
    auto check = [&](const Outputs& got, Device device) {
      ASSERT_EQ(got.size(), cpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) {
        const auto& [name, t] = got[i];
        EXPECT_EQ(t.device(), device) << name;
        const auto it = slack.find(name);
        const auto fx = fixed.find(name);
        const double tol = fx != fixed.end()
                               ? fx->second
                               : tolerance(dt()) * (it == slack.end() ? 1.0 : it->second);
        const double err = rel_error(values(t), values(cpu[i].second));
        EXPECT_LE(err, tol) << name << " (" << dtype_name(dt()) << " on " << device_name(device)
                            << ")";
      }
    };
    if (dt() != DType::F32) check(run(Backend{Device::CPU, dt()}), Device::CPU);
    if (!device_available(Device::CUDA))
      GTEST_SKIP() << "no CUDA backend or no GPU here: the CPU sides ran (fp32 and "
                   << dtype_name(dt()) << "), the CUDA side did not";
    check(run(Backend{Device::CUDA, dt()}), Device::CUDA);
  }
};

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
        ops::linear_backward(tx, tw, tdy, &dx, dw, &db);
        Tensor dw_only = be.zeros({out, in}, DType::F32);
        ops::linear_backward(tx, tw, tdy, nullptr, dw_only, nullptr);
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
    ops::linear_backward(tx, tw, tdy, &dx, dw, &db);
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
    ops::swiglu_forward(tx, sy);
    ops::swiglu_backward(tx, be.make(dys, {rows, f}), sdx);
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

struct AttentionCase {
  kernels::AttentionShape shape;
  bool causal, key_mask;
  float dropout;
};

class CudaVsCpuAttention : public CudaVsCpuOps {
 protected:
  void run_attention(const AttentionCase& c) {
    const kernels::AttentionShape& s = c.shape;
    const int64_t n_qkv = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
    const auto qkv = rnd(n_qkv, 51), dout = rnd(n_out, 52);
    std::vector<uint8_t> mask(s.B * s.S, 1);
    for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
    for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // 1: a prefix
    compare(
        [&](const Backend& be) {
          Tensor tmask = be.bytes(mask);  // on the run's device, as the kernels need
          kernels::AttentionOptions opt;
          opt.scale = 1.0f / std::sqrt(float(s.Dh));
          opt.causal = c.causal;
          opt.key_mask = c.key_mask ? static_cast<const uint8_t*>(tmask.raw()) : nullptr;
          opt.dropout_p = c.dropout;
          opt.seed = 99;
          opt.stream = 5;
          Tensor tqkv = be.make(qkv, {s.S, s.B, s.G, s.H / s.G + 2, s.Dh});
          Tensor out = be.act_zeros({s.S, s.B, s.H, s.Dh});
          Tensor probs = be.zeros({s.B, s.H, s.S, s.S}, DType::F32);
          ops::attention_forward(s, opt, tqkv, out, probs);
          Tensor dqkv = be.act_zeros({n_qkv});
          ops::attention_backward(s, opt, tqkv, probs, be.make(dout, {n_out}), dqkv);
          return Outputs{{"out", out}, {"probs", probs}, {"dqkv", dqkv}};
        },
        // Backward chains several roundings to T (dropped probs, dS); probs are fp32 softmaxes of
        // fp32 scores of the same (rounded) inputs, whatever T.
        {{"dqkv", 3.0}}, {{"probs", 1e-4}});
  }
};

TEST_P(CudaVsCpuAttention, CausalGqaMaskDropoutOffsets) {
  run_attention({{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f});
}
TEST_P(CudaVsCpuAttention, PlainMultiHead) { run_attention({{37, 2, 4, 4, 16}, false, false, 0}); }
TEST_P(CudaVsCpuAttention, MultiQueryPaddedDropout) {
  run_attention({{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f});
}

// Flash attention (ops::flash_attention_*): CUDA flash in dt() against CPU flash in fp32, and on
// the GPU against the unfused CUDA path of the same dtype (same dropout masks).
class CudaVsCpuFlashAttention : public CudaVsCpuOps {
 protected:
  void run_flash(const AttentionCase& c) {
    const kernels::AttentionShape& s = c.shape;
    const int64_t n_qkv = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
    const auto qkv = rnd(n_qkv, 61), dout = rnd(n_out, 62);
    std::vector<uint8_t> mask(s.B * s.S, 1);
    for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
    for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // 1: a prefix
    compare(
        [&](const Backend& be) {
          Tensor tmask = be.bytes(mask);
          kernels::AttentionOptions opt;
          opt.scale = 1.0f / std::sqrt(float(s.Dh));
          opt.causal = c.causal;
          opt.key_mask = c.key_mask ? static_cast<const uint8_t*>(tmask.raw()) : nullptr;
          opt.dropout_p = c.dropout;
          opt.seed = 99;
          opt.stream = 5;
          Tensor tqkv = be.make(qkv, {s.S, s.B, s.G, s.H / s.G + 2, s.Dh});
          Tensor tdout = be.make(dout, {n_out});
          Tensor out = be.act_zeros({s.S, s.B, s.H, s.Dh});
          Tensor lse = be.zeros({s.B, s.H, s.S}, DType::F32);
          ops::flash_attention_forward(s, opt, tqkv, out, lse);
          Tensor dqkv = be.act_zeros({n_qkv});
          ops::flash_attention_backward(s, opt, tqkv, out, lse, tdout, dqkv);
          // Rows with no visible key have lse = -inf on both sides: compare the finite part.
          std::vector<float> l = values(lse);
          for (float& x : l)
            if (std::isinf(x)) x = 0.0f;
          if (be.device == Device::CUDA) {
            Tensor uout = be.act_zeros({s.S, s.B, s.H, s.Dh});
            Tensor probs = be.zeros({s.B, s.H, s.S, s.S}, DType::F32);
            ops::attention_forward(s, opt, tqkv, uout, probs);
            Tensor udqkv = be.act_zeros({n_qkv});
            ops::attention_backward(s, opt, tqkv, probs, tdout, udqkv);
            EXPECT_LE(rel_error(values(out), values(uout)), 2 * tolerance(be.dtype))
                << "flash vs unfused out on CUDA";
            EXPECT_LE(rel_error(values(dqkv), values(udqkv)), 6 * tolerance(be.dtype))
                << "flash vs unfused dqkv on CUDA";
          }
          return Outputs{{"out", out}, {"lse", be.f32(l, {s.B, s.H, s.S})}, {"dqkv", dqkv}};
        },
        {{"dqkv", 3.0}}, {{"lse", 1e-4}});
  }
};

TEST_P(CudaVsCpuFlashAttention, CausalGqaMaskDropoutOffsets) {
  run_flash({{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f});
}
TEST_P(CudaVsCpuFlashAttention, PlainMultiHeadCrossesTiles) {
  run_flash({{70, 2, 4, 4, 32}, false, false, 0});
}
TEST_P(CudaVsCpuFlashAttention, MultiQueryPaddedDropoutDh64) {
  run_flash({{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f});
}
TEST_P(CudaVsCpuFlashAttention, CausalDh128) { run_flash({{45, 1, 2, 2, 128}, true, false, 0}); }
TEST_P(CudaVsCpuFlashAttention, CausalPaddedDh256) {
  run_flash({{33, 1, 2, 1, 256}, true, true, 0.1f});
}
TEST_P(CudaVsCpuFlashAttention, OddHeadDim) { run_flash({{41, 2, 3, 3, 40}, true, true, 0}); }

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

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuOps,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuNorms,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuAttention,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuFlashAttention,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuFp32Ops, ::testing::Values(DType::F32), dtype_param_name);

// ---- CUDA tensors: copies, views, zero_, memory stats (GPU only) ----------------------------

TEST(CudaTensor, CopiesRoundTripEveryDtypeBitForBit) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U16, DType::U8}) {
    Tensor h = Tensor::empty({3, 1001}, t);
    auto* bytes = static_cast<uint8_t*>(h.raw());
    for (size_t i = 0; i < h.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    Tensor d = h.to(Device::CUDA);
    EXPECT_EQ(d.device(), Device::CUDA);
    EXPECT_TRUE(d.owns_storage());
    Tensor d2 = d.clone();  // device to device
    Tensor back = d2.to(Device::CPU);
    EXPECT_EQ(std::memcmp(back.raw(), h.raw(), h.nbytes()), 0) << dtype_name(t);
    // A view (row 1) copied out, and a host row copied into a device view.
    Tensor row = d.slice(1, 2).to(Device::CPU);
    EXPECT_EQ(std::memcmp(row.raw(), h.slice(1, 2).raw(), row.nbytes()), 0) << dtype_name(t);
    Tensor dv = d.slice(2, 3);
    dv.copy_from(h.slice(0, 1));
    Tensor all = d.to(Device::CPU);
    EXPECT_EQ(std::memcmp(all.slice(2, 3).raw(), h.slice(0, 1).raw(), row.nbytes()), 0);
  }
}

TEST(CudaTensor, ZerosToSelfAndMemoryStats) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  const MemoryStats cpu_before = cpu_memory_stats();
  const MemoryStats before = memory_stats(Device::CUDA);
  {
    Tensor z = Tensor::zeros({1 << 20}, DType::F32, Device::CUDA);
    EXPECT_GE(memory_stats(Device::CUDA).current_bytes, before.current_bytes + (4 << 20));
    EXPECT_GE(memory_stats(Device::CUDA).peak_bytes, before.current_bytes + (4 << 20));
    EXPECT_EQ(z.to(Device::CUDA).raw(), z.raw());  // already there: the same memory
    EXPECT_EQ(ops::sum_squares(z), 0.0);
    Tensor ones = host_tensor(std::vector<float>(1 << 20, 1.0f), {1 << 20}, DType::F32);
    z.copy_from(ones);
    EXPECT_EQ(ops::sum_squares(z), double(1 << 20));
    z.zero_();
    EXPECT_EQ(ops::sum_squares(z), 0.0);
    Tensor empty = Tensor::empty({0}, DType::F32, Device::CUDA);
    EXPECT_EQ(empty.to(Device::CPU).numel(), 0);
  }
  EXPECT_EQ(memory_stats(Device::CUDA).current_bytes, before.current_bytes);
  // Device tensors are not host memory. (The host tensor above was freed again.)
  EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_before.current_bytes);
}

TEST(CudaTensor, KeyMaskOnTheHostIsRejected) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  const kernels::AttentionShape s{4, 1, 2, 2, 8};
  std::vector<uint8_t> mask(4, 1);
  kernels::AttentionOptions opt;
  opt.scale = 0.3f;
  opt.causal = true;
  opt.key_mask = mask.data();  // host memory
  Tensor qkv = Tensor::zeros({4, 1, 2, 3, 8}, DType::F32, Device::CUDA);
  Tensor out = Tensor::zeros({4, 1, 2, 8}, DType::F32, Device::CUDA);
  Tensor probs = Tensor::zeros({1, 2, 4, 4}, DType::F32, Device::CUDA);
  try {
    ops::attention_forward(s, opt, qkv, out, probs);
    FAIL() << "a host key_mask with cuda tensors was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("key_mask must point to GPU memory"));
  }
}

TEST(CudaTensor, UnsupportedDtypesAreNamed) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  Tensor x = Tensor::zeros({8}, DType::F64, Device::CUDA),
         y = Tensor::zeros({8}, DType::F64, Device::CUDA);
  try {
    ops::gelu_forward(x, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("gelu_forward: x must be fp32, bf16 or fp16 on cuda, got fp64"));
  }
  Tensor a = Tensor::zeros({8}, DType::F32, Device::CUDA),
         b = Tensor::zeros({8}, DType::BF16, Device::CUDA);
  EXPECT_THROW(ops::add(a, b, a), Error);  // mixed dtypes
}

// ---- device checks that hold in every build ---------------------------------------------------

// A CUDA tensor that is never dereferenced: the device checks run before any kernel.
Tensor fake_cuda(const Shape& shape, DType t = DType::F32) {
  alignas(256) static char never_touched[256];
  return Tensor::wrap(never_touched, shape, t, Device::CUDA);
}

TEST(DeviceDispatch, MixedDevicesAreRejectedNamingEachTensor) {
  Tensor a = Tensor::zeros({4}, DType::F32), out = Tensor::zeros({4}, DType::F32);
  try {
    ops::add(a, fake_cuda({4}), out);
    FAIL() << "mixed devices were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("add: tensors on different devices (a on cpu, b on cuda, "
                                    "out on cpu)"));
    EXPECT_THAT(e.what(), HasSubstr("Tensor::to(Device)"));
  }
  Tensor w = Tensor::zeros({3, 4}, DType::F32), y = Tensor::zeros({2, 3}, DType::F32);
  Tensor b = fake_cuda({3});
  try {
    ops::linear_forward(Tensor::zeros({2, 4}, DType::F32), w, &b, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("b on cuda"));
  }
}

TEST(DeviceDispatch, CastRejectsNonFloatTypes) {
  Tensor i = Tensor::zeros({4}, DType::I32), f = Tensor::zeros({4}, DType::F32);
  try {
    ops::cast(i, f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cast: src must be fp32, bf16 or fp16, got int32"));
  }
}

// The dtype contract (backend/float_args.h) holds on every device, so a mix the CUDA kernels
// would reject fails on the CPU too, naming the tensors.
TEST(DeviceDispatch, OpsCheckOneDtypeContractOnEveryDevice) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Tensor x = Tensor::zeros({4, 8}, DType::BF16), y32 = Tensor::zeros({4, 8}, DType::F32);
  EXPECT_THAT(error_of([&] { ops::gelu_forward(x, y32); }),
              HasSubstr("gelu_forward: y is fp32 but x is bf16 (these must have one dtype)"));
  Tensor w16 = Tensor::zeros({8}, DType::F16), mean = Tensor::zeros({4}, DType::F32),
         rstd = Tensor::zeros({4}, DType::F32), y = Tensor::zeros({4, 8}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::layernorm_forward(x, w16, w16, 1e-5f, y, mean, rstd); }),
              HasSubstr("layernorm_forward: w must be fp32 or bf16 (the dtype of x), got fp16"));
  Tensor mean16 = Tensor::zeros({4}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::rmsnorm_forward(x, y32.flat_view(0, {8}), 1e-5f, y, mean16); }),
              HasSubstr("rmsnorm_forward: rstd must be fp32, got bf16"));
  Tensor ints = Tensor::zeros({4, 8}, DType::I32);
  EXPECT_THAT(error_of([&] { ops::add(x, x, ints); }),
              HasSubstr("add: out must be fp32, bf16 or fp16, got int32"));
  // Allowed mixes: fp32 norm weights with bf16 activations, fp32 accumulation of bf16 values.
  ops::layernorm_forward(x, y32.flat_view(0, {8}), y32.flat_view(8, {8}), 1e-5f, y, mean, rstd);
  ops::add_inplace(y32, x);
}

TEST(DeviceDispatch, SumSquaresOfSeveralTensors) {
  const Tensor a = host_tensor({1.0f, -2.0f, 0.5f}, {3}, DType::F32),
               b = host_tensor({3.0f}, {1}, DType::F32);
  EXPECT_EQ(ops::sum_squares_of({a, b}), 14.25);
  EXPECT_EQ(ops::sum_squares_of({}), 0.0);
  const Tensor h = host_tensor({1.0f}, {1}, DType::BF16);
  EXPECT_THROW(ops::sum_squares_of({a, h}), Error);
}

// A 16-bit op on the CPU reads its 16-bit inputs exactly, computes in fp32 and rounds each
// written tensor once (to nearest even); in-place arguments see one copy.
TEST(DeviceDispatch, CpuSixteenBitOpsRoundTheFp32ResultOnce) {
  const std::vector<float> a = {1.0f, -2.5f, 3.0f, 0.1f}, b = {0.00390625f, 1.0f, -0.75f, 0.2f};
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor ta = host_tensor(a, {4}, dt), tb = host_tensor(b, {4}, dt), out = Tensor::empty({4}, dt);
    ops::add(ta, tb, out);
    const auto va = values(ta), vb = values(tb), vo = values(out);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(vo[i], round_to(dt, va[i] + vb[i])) << i;
    ops::add(ta, ta, ta);  // in place: every element doubled exactly
    const auto doubled = values(ta);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(doubled[i], 2.0f * va[i]) << i;
    Tensor acc = Tensor::zeros({4}, DType::F32);
    ops::add_inplace(acc, tb);  // fp32 accumulator, 16-bit addend: exact
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(acc.data<float>()[i], vb[i]) << i;
  }
}

TEST(DeviceDispatch, CudaTensorsWithoutACudaBackend) {
#ifdef MEGATRON_WITH_CUDA
  if (device_available(Device::CUDA)) GTEST_SKIP() << "this build has CUDA and a GPU";
  // A CUDA build on a machine without a GPU: allocation names the missing device.
  try {
    Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no CUDA device is visible"));
  }
#else
  try {
    Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("this build has no cuda backend"));
    EXPECT_THAT(e.what(), HasSubstr("-DMEGATRON_CUDA=ON"));
  }
  Tensor x = fake_cuda({4}), y = fake_cuda({4});
  try {
    ops::gelu_forward(x, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("gelu_forward: the tensors are on cuda but this build has no CUDA "
                          "backend"));
  }
  EXPECT_THROW(Tensor::zeros({4}, DType::F32).to(Device::CUDA), Error);
  EXPECT_THROW(x.to(Device::CPU), Error);
  EXPECT_THROW(memory_stats(Device::CUDA), Error);
  EXPECT_FALSE(device_available(Device::CUDA));
#endif
  EXPECT_TRUE(device_available(Device::CPU));
}

// ---- Tensor's device plumbing through a fake backend (host memory posing as a device) --------

class FakeDeviceMemory final : public DeviceMemoryBackend {
 public:
  int device_count() override { return 1; }
  DeviceAllocation allocate(size_t bytes) override {
    ++allocs;
    live += static_cast<int64_t>(bytes);
    void* p = std::malloc(bytes);
    sizes[p] = bytes;
    return {p, 3};
  }
  void deallocate(const DeviceAllocation& block) noexcept override {
    ++frees;
    EXPECT_EQ(block.device_index, 3);
    live -= static_cast<int64_t>(sizes[block.ptr]);
    sizes.erase(block.ptr);
    std::free(block.ptr);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override {
    copies.push_back({dst_device, src_device});
    std::memmove(dst, src, bytes);
  }
  void zero(void* ptr, size_t bytes) override {
    ++zeros;
    std::memset(ptr, 0, bytes);
  }
  MemoryStats memory_stats() override { return {live, live}; }

  int allocs = 0, frees = 0, zeros = 0;
  int64_t live = 0;
  std::map<void*, size_t> sizes;
  std::vector<std::pair<Device, Device>> copies;  // (dst, src)
};

class ScopedBackend {
 public:
  explicit ScopedBackend(DeviceMemoryBackend* b)
      : previous_(set_device_memory_backend(Device::CUDA, b)) {}
  ~ScopedBackend() { set_device_memory_backend(Device::CUDA, previous_); }

 private:
  DeviceMemoryBackend* previous_;
};

TEST(TensorDevicePlumbing, AllocatesCopiesAndFreesThroughTheBackend) {
  FakeDeviceMemory fake;
  const MemoryStats cpu_before = cpu_memory_stats();
  {
    ScopedBackend scoped(&fake);
    EXPECT_TRUE(device_available(Device::CUDA));
    Tensor h = Tensor::empty({2, 3}, DType::F32);
    for (int i = 0; i < 6; ++i) h.data<float>()[i] = float(i + 1);
    const int64_t cpu_with_h = cpu_memory_stats().current_bytes;

    Tensor d = h.to(Device::CUDA);  // allocate + host-to-device copy
    EXPECT_EQ(d.device(), Device::CUDA);
    EXPECT_EQ(fake.allocs, 1);
    EXPECT_EQ(memory_stats(Device::CUDA).current_bytes, 24);
    EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_with_h);  // device bytes are not host bytes
    Tensor same = d.to(Device::CUDA);
    EXPECT_EQ(same.raw(), d.raw());
    EXPECT_EQ(fake.allocs, 1);

    Tensor c = d.clone();                         // allocate + device-to-device
    Tensor back = c.slice(1, 2).to(Device::CPU);  // device-to-host of a view
    EXPECT_EQ(back.data<float>()[0], 4.0f);
    EXPECT_EQ(back.data<float>()[2], 6.0f);
    c.zero_();
    EXPECT_EQ(fake.zeros, 1);
    EXPECT_EQ(c.to(Device::CPU).data<float>()[5], 0.0f);
    Tensor z = Tensor::zeros({0}, DType::F32, Device::CUDA);  // nothing to allocate or zero
    EXPECT_EQ(fake.zeros, 1);

    const std::vector<std::pair<Device, Device>> expected = {{Device::CUDA, Device::CPU},
                                                             {Device::CUDA, Device::CUDA},
                                                             {Device::CPU, Device::CUDA},
                                                             {Device::CPU, Device::CUDA}};
    EXPECT_EQ(fake.copies, expected);
    EXPECT_THROW(d.copy_from(Tensor::zeros({5}, DType::F32)), Error);  // numel mismatch
  }
  EXPECT_EQ(fake.allocs, fake.frees);
  EXPECT_EQ(fake.live, 0);
  EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_before.current_bytes);
  // The previous registration is back.
  EXPECT_NE(device_memory_backend(Device::CUDA), &fake);
}

}  // namespace
}  // namespace megatron
