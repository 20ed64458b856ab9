#pragma once
// Helpers shared by the CUDA kernel tests (tests/unit/test_cuda_kernels*.cpp): storage-type
// rounding and conversion (fp32, bf16, fp16), device arrays filled from and read back into float
// vectors, norm-relative errors with per-storage-type tolerances, the GEMM context, and the typed
// CudaOps fixture over the storage types. CUDA builds only: empty without MEGATRON_WITH_CUDA.
#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cuda/gemm.h"
#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/device.h"
#include "tests/support/rel_error.h"

namespace megatron::kernels::cuda::testing {

namespace mc = megatron::cuda;
namespace kc = megatron::kernels::cuda;
namespace math = megatron::math;
using megatron::DType;

#define REQUIRE_GPU() \
  if (::megatron::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

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

inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
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

using megatron::testing::rel_error;  // tests/support/rel_error.h

template <typename T>
DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::BF16;
  return DType::F16;
}

inline kc::GemmContext& gemm_ctx() {
  static kc::GemmContext ctx(mc::device_allocator());
  return ctx;
}

#define EXPECT_CLOSE(gpu, cpu, tolerance)                                             \
  EXPECT_LE(::megatron::kernels::cuda::testing::rel_error((gpu), (cpu)), (tolerance)) \
      << #gpu " vs " #cpu

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

}  // namespace megatron::kernels::cuda::testing

#endif  // MEGATRON_WITH_CUDA
