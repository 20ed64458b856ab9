#pragma once
// Helpers shared by the ops tests (tests/unit/test_ops_backends*.cpp): values rounded to a storage
// type, host tensors of any float dtype, norm-relative errors with per-dtype tolerances, and the
// CudaVsCpuOps fixture that runs one case through ops:: on the CPU (fp32, then the tested dtype)
// and, when a GPU is there, on CUDA, comparing every output with the fp32 CPU one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "megatron/core/tensor.h"
#include "tests/support/rel_error.h"

namespace megatron {

// Test names and messages print the dtype's name ("bf16"), not its byte.
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }

namespace ops::testing {

// ---- values and tensors --------------------------------------------------------------------

inline float round_to(DType t, float x) {
  switch (t) {
    case DType::BF16:
      return math::bf16_bits_to_float(math::float_to_bf16_bits(x));
    case DType::F16:
      return math::fp16_bits_to_float(math::float_to_fp16_bits(x));
    default:
      return x;
  }
}

inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A host tensor of `dtype` holding `v` (rounded to nearest even for bf16/fp16).
inline Tensor host_tensor(const std::vector<float>& v, const Shape& shape, DType dtype) {
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
inline std::vector<float> values(const Tensor& t) {
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

using megatron::testing::rel_error;  // tests/support/rel_error.h

// Per-dtype tolerances for one rounding of the result to the storage type plus the kernels' own
// differences (fp32 accumulation order, library GEMMs, sin/cos/exp ulps).
inline double tolerance(DType t) {
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

// Parameterized suites are named by dtype ("Dtypes/CudaVsCpuOps.Linear/bf16").
inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace ops::testing
}  // namespace megatron
