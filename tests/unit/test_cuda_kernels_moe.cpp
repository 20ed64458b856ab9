// The CUDA MoE row kernels (kernels/cuda/moe_rows.h) against the CPU kernels on the same inputs,
// for each storage type (fp32, bf16, fp16), as test_cuda_kernels.cpp: gathers and scatters are
// bit-identical for every word width the launcher picks (row sizes and pointer offsets), the
// ungated slot sums equal the CPU's bit for bit (same order, no rounding but the last), the gated
// ones and the gate gradients agree to the dtype's tolerance, the row gradients exactly.
// Without a CUDA build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/moe_rows.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/moe_rows.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaMoeKernels, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
using kc::testing::CudaOps;
using kc::testing::Dev;
using kc::testing::DevRaw;
using kc::testing::randn;
using kc::testing::rounded;
using kc::testing::StorageNames;
using kc::testing::StorageTypes;
using kc::testing::tol;

std::vector<int32_t> some_rows(int64_t n, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& i : v) i = rng() % 4 == 0 ? -1 : static_cast<int32_t>(rng() % rows);
  return v;
}

// Byte rows at every word width: row sizes with 1..16-byte factors, buffers offset by 0..8 bytes.
TEST(CudaMoeKernels, MovesAreBitIdenticalForEveryWordWidth) {
  REQUIRE_GPU();
  const int64_t src_rows = 45, n = 70;
  for (size_t row_bytes :
       {size_t{1}, size_t{2}, size_t{6}, size_t{12}, size_t{16}, size_t{40}, size_t{1024}})
    for (size_t offset : {size_t{0}, size_t{2}, size_t{8}}) {
      std::mt19937 rng(static_cast<uint32_t>(row_bytes * 31 + offset));
      std::vector<uint8_t> src(offset + src_rows * row_bytes);
      for (auto& b : src) b = static_cast<uint8_t>(rng());
      const auto idx = some_rows(n, src_rows, static_cast<uint32_t>(row_bytes));
      std::vector<uint8_t> want(offset + n * row_bytes, 0);
      kp::gather_rows(src.data() + offset, src_rows, idx.data(), n, row_bytes,
                      want.data() + offset);
      DevRaw<uint8_t> dsrc(src), dout(want.size());
      DevRaw<int32_t> didx(idx);
      kc::gather_rows(dsrc.p() + offset, src_rows, didx.p(), n, row_bytes, dout.p() + offset,
                      nullptr);
      EXPECT_EQ(dout.get(), want) << "gather, row " << row_bytes << " bytes, offset " << offset;
      // Scatter the first src_rows rows of the gather back through a permutation.
      std::vector<int32_t> perm(static_cast<size_t>(src_rows));
      for (int64_t i = 0; i < src_rows; ++i) perm[i] = static_cast<int32_t>((i * 7 + 3) % src_rows);
      perm[5] = -1;
      std::vector<uint8_t> scattered(src.size(), 0);
      kp::scatter_rows(src.data() + offset, perm.data(), src_rows, src_rows, row_bytes,
                       scattered.data() + offset);
      DevRaw<uint8_t> dscat(scattered.size());
      DevRaw<int32_t> dperm(perm);
      kc::scatter_rows(dsrc.p() + offset, dperm.p(), src_rows, src_rows, row_bytes,
                       dscat.p() + offset, nullptr);
      EXPECT_EQ(dscat.get(), scattered) << "scatter, row " << row_bytes << " bytes";
    }
}

TYPED_TEST_SUITE(CudaOps, StorageTypes, StorageNames);

TYPED_TEST(CudaOps, MoeCombine) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t tokens = 301, k = 3, dim = 97, n_rows = 500, slots = tokens * k;
  const auto rows = rounded<T>(randn(n_rows * dim, 1)),
             slot_rows = rounded<T>(randn(slots * dim, 2));
  const auto gates = randn(slots, 3, 0.5f);
  const auto idx = some_rows(slots, n_rows, 4);
  Dev<T> drows(rows), dslots(slot_rows), dout(tokens * dim);
  Dev<float> dgates(gates), dout32(tokens * dim);
  DevRaw<int32_t> didx(idx);
  std::vector<float> want(tokens * dim);
  // The dispatcher's backward: indexed, ungated, into fp32: the same additions in the same order.
  kp::moe_combine(rows.data(), n_rows, idx.data(), nullptr, tokens, k, dim, want.data());
  kc::moe_combine<T, float>(drows.p(), n_rows, didx.p(), nullptr, tokens, k, dim, dout32.p(),
                            nullptr);
  EXPECT_EQ(dout32.get(), want);
  // The layer's forward: slot rows with gates, into T.
  kp::moe_combine(slot_rows.data(), slots, nullptr, gates.data(), tokens, k, dim, want.data());
  kc::moe_combine<T, T>(dslots.p(), slots, nullptr, dgates.p(), tokens, k, dim, dout.p(), nullptr);
  EXPECT_CLOSE(dout.get(), rounded<T>(want), tol<T>());
}

TYPED_TEST(CudaOps, MoeCombineBackward) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t tokens = 211, k = 2, dim = 300, slots = tokens * k;
  const auto rows = rounded<T>(randn(slots * dim, 5)), dy = rounded<T>(randn(tokens * dim, 6));
  const auto gates = randn(slots, 7, 0.5f);
  std::vector<float> d_rows(slots * dim), d_gates(slots);
  kp::moe_combine_backward(rows.data(), gates.data(), dy.data(), tokens, k, dim, d_rows.data(),
                           d_gates.data());
  Dev<T> drows(rows), ddy(dy), dd_rows(slots * dim);
  Dev<float> dgates(gates), dd_gates(slots);
  kc::moe_combine_backward<T>(drows.p(), dgates.p(), ddy.p(), tokens, k, dim, dd_rows.p(),
                              dd_gates.p(), nullptr);
  EXPECT_EQ(dd_rows.get(), rounded<T>(d_rows)) << "one product, rounded once";
  EXPECT_CLOSE(dd_gates.get(), d_gates, 1e-6);  // fp64 sums in another order
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
