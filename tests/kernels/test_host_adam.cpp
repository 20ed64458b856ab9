// The host AdamW of the offloaded optimizer: each vectorised path this CPU can run (AVX-512,
// AVX2) and the scalar one give kernels::ref::adamw_step's bits exactly, over several steps and
// for lengths that leave every kind of vector tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/host_adam.h"
#include "kernels/cpu/reference/optim.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(HostAdamW, EveryPathMatchesTheReferenceBitForBit) {
  const cpu::HostAdamIsa widest = cpu::host_adam_isa();
  std::printf("host AdamW: this CPU runs the %s path\n",
              std::string(cpu::host_adam_isa_name(widest)).c_str());
  for (cpu::HostAdamIsa isa :
       {cpu::HostAdamIsa::Scalar, cpu::HostAdamIsa::Avx2, cpu::HostAdamIsa::Avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(widest)) continue;
    for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 1000, 40001}) {
      SCOPED_TRACE(std::string(cpu::host_adam_isa_name(isa)) + " n=" + std::to_string(n));
      auto p = random_vector(n, 1), m = std::vector<float>(n, 0.0f), v = m;
      auto p_ref = p, m_ref = m, v_ref = v;
      for (int step = 1; step <= 4; ++step) {
        const auto g = random_vector(n, uint32_t(20 + step), -2.0f, 2.0f);
        const math::AdamWParams hp{1e-3f,
                                   0.9f,
                                   0.95f,
                                   1e-8f,
                                   step % 2 ? 0.1f : 0.0f,
                                   1.0f - std::pow(0.9f, float(step)),
                                   1.0f - std::pow(0.95f, float(step))};
        cpu::host_adamw_step(p.data(), g.data(), m.data(), v.data(), n, hp, isa);
        ref::adamw_step(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, hp);
      }
      EXPECT_TRUE(same_bits(p, p_ref));
      EXPECT_TRUE(same_bits(m, m_ref));
      EXPECT_TRUE(same_bits(v, v_ref));
    }
  }
}

TEST(HostAdamW, RefusesAPathWiderThanTheCpu) {
  if (cpu::host_adam_isa() == cpu::HostAdamIsa::Avx512) GTEST_SKIP() << "this CPU runs them all";
  float x = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(
      cpu::host_adamw_step(&x, &g, &m, &v, 1, math::AdamWParams{}, cpu::HostAdamIsa::Avx512),
      megatron::Error);
}

}  // namespace
}  // namespace megatron::kernels
