// CUDA vs CPU for the ops the CUDA backend has so far. Reports SKIPPED (never passed) when the
// build has no CUDA or the machine has no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#ifdef MEGATRON_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#include "megatron/backend/cuda/device.h"
#endif

namespace {

TEST(CudaBackend, GeluMatchesCpu) {
#ifndef MEGATRON_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
#else
  if (megatron::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const int64_t n = 100003;
  std::vector<float> x(n), dy(n), y_cpu(n), dx_cpu(n), y_gpu(n), dx_gpu(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = dist(rng), dy[i] = dist(rng);
  megatron::kernels::cpu::gelu_forward(x.data(), y_cpu.data(), n);
  megatron::kernels::cpu::gelu_backward(x.data(), dy.data(), dx_cpu.data(), n);
  const size_t bytes = n * sizeof(float);
  megatron::cuda::DeviceBuffer dx_in(bytes), ddy(bytes), dy_out(bytes), ddx(bytes);
  dx_in.copy_from_host(x.data(), bytes);
  ddy.copy_from_host(dy.data(), bytes);
  auto* xp = static_cast<float*>(dx_in.data());
  megatron::kernels::cuda::gelu_forward(xp, static_cast<float*>(dy_out.data()), n,
                                        megatron::math::Gelu::Tanh, nullptr);
  megatron::kernels::cuda::gelu_backward(xp, static_cast<const float*>(ddy.data()),
                                         static_cast<float*>(ddx.data()), n,
                                         megatron::math::Gelu::Tanh, nullptr);
  dy_out.copy_to_host(y_gpu.data(), bytes);
  ddx.copy_to_host(dx_gpu.data(), bytes);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(y_gpu[i], y_cpu[i], 1e-5f * (1.0f + std::abs(y_cpu[i]))) << i;
    ASSERT_NEAR(dx_gpu[i], dx_cpu[i], 1e-5f * (1.0f + std::abs(dx_cpu[i]))) << i;
  }
#endif
}

}  // namespace
