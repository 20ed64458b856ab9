// Shared element-wise math (kernels/common/numeric.h).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/common/yarn.h"

namespace megatron {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
bool is_fp16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// The compiler's own conversion (F16C / AVX512-FP16 instructions, or libgcc) as the oracle.
uint16_t fp16_oracle(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

TEST(Fp16, ExhaustiveBitsToFloatToBitsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto h16 = static_cast<uint16_t>(h);
    const float f = math::fp16_bits_to_float(h16);
    const uint16_t back = math::float_to_fp16_bits(f);
    if (is_fp16_nan(h16)) {  // NaN payloads may be quieted differently: only NaN-ness counts
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(is_fp16_nan(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000u, h16 & 0x8000u) << "NaN sign " << std::hex << h;
    } else {
      ASSERT_EQ(bits(f), bits(static_cast<float>(std::bit_cast<_Float16>(h16)))) << std::hex << h;
      ASSERT_EQ(back, h16) << std::hex << h;
    }
  }
}

TEST(Fp16, FloatToBitsMatchesCompilerOnEdgesAndRandomFloats) {
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              1.0f,
                              -1.0f,
                              65504.0f,
                              65519.99f,
                              65520.0f,
                              1e6f,
                              -1e6f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::denorm_min(),
                              5.96e-8f,
                              2.98e-8f,
                              2.99e-8f,
                              6.1e-5f,
                              6.104e-5f,
                              1e-40f};
  // Exact halfway points between neighbouring fp16 values (ties to even), in the normal and the
  // subnormal range, plus one float ulp either side.
  for (uint32_t h : {0x3c00u, 0x3c01u, 0x0001u, 0x0002u, 0x03ffu, 0x7bfeu, 0x0400u, 0x1234u}) {
    const double lo = math::fp16_bits_to_float(uint16_t(h));
    const double hi = math::fp16_bits_to_float(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);
    cases.insert(cases.end(), {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) cases.push_back(from_bits(rng()));  // all exponents, NaNs too
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) cases.push_back(in_range(rng));
  for (float f : cases) {
    const uint16_t got = math::float_to_fp16_bits(f), want = fp16_oracle(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_fp16_nan(got)) << std::hex << bits(f);
    } else {
      ASSERT_EQ(got, want) << "float bits 0x" << std::hex << bits(f) << " (" << f << ")";
    }
  }
}

// Value of a bf16 pattern (as float bits), reading the all-ones exponent with a zero mantissa
// as 2^128: the successor of the largest finite value if the exponent were unbounded, which is
// where IEEE rounding places the overflow threshold.
double bf16_candidate_value(uint32_t b) {
  if ((b & 0x7fffffffu) == 0x7f800000u) return std::copysign(std::ldexp(1.0, 128), from_bits(b));
  return from_bits(b);
}

// Nearest bf16 by explicit comparison of the two candidates, ties to the even mantissa.
uint16_t bf16_oracle(float f) {
  const uint32_t down = bits(f) & 0xffff0000u, up = down + 0x10000u;
  const double dd = std::fabs(double(f) - bf16_candidate_value(down));
  const double du = std::fabs(bf16_candidate_value(up) - double(f));
  if (dd < du || (dd == du && ((down >> 16) & 1u) == 0)) return uint16_t(down >> 16);
  return uint16_t(up >> 16);
}

TEST(Bf16, RoundsToNearestEven) {
  // Ties: 1 + 2^-8 lies halfway between bf16 1.0 (even) and 1.0078125 (odd) -> 1.0;
  // 1.0078125 + 2^-8 lies halfway between odd and even -> rounds up to the even one.
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x3f808000u)), 0x3f80u);
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x3f818000u)), 0x3f82u);
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0xbf808000u)), 0xbf80u);
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x7f7fffffu)), 0x7f80u);  // max float -> inf
  EXPECT_EQ(math::float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x00008000u)), 0x0000u);  // subnormal tie
  EXPECT_EQ(math::float_to_bf16_bits(from_bits(0x00018000u)), 0x0002u);
  const uint16_t nan = math::float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(math::bf16_bits_to_float(nan)));
  // A signalling NaN whose payload sits only in the low 16 bits must stay NaN.
  EXPECT_TRUE(
      std::isnan(math::bf16_bits_to_float(math::float_to_bf16_bits(from_bits(0x7f800001u)))));

  std::mt19937 rng(2);
  for (int i = 0; i < 300000; ++i) {
    const float f = from_bits(rng());
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(math::float_to_bf16_bits(f), bf16_oracle(f)) << std::hex << bits(f);
  }
  for (uint32_t b = 0; b < 65536; ++b) {  // every bf16 value converts back exactly
    const float f = math::bf16_bits_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(math::float_to_bf16_bits(f), b) << std::hex << b;
  }
}

// d/dx of the activation by central differences in double, against the analytic derivative.
template <class F, class G>
void expect_derivative(F f, G grad, double lo, double hi) {
  for (double x = lo; x <= hi; x += 0.173) {
    const double h = 1e-3;
    const double fd = (double(f(float(x + h))) - double(f(float(x - h)))) /
                      (double(float(x + h)) - double(float(x - h)));
    EXPECT_NEAR(grad(float(x)), fd, 2e-3 * (1.0 + std::fabs(fd))) << "x=" << x;
  }
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  expect_derivative(math::gelu_tanh, math::gelu_tanh_grad, -6.0, 6.0);
  expect_derivative(math::gelu_erf, math::gelu_erf_grad, -6.0, 6.0);
  expect_derivative(math::silu, math::silu_grad, -8.0, 8.0);
}

// Against double precision, relative to the value itself: GELU's negative tail (where
// 0.5 x (1 + tanh u) cancels to 0, even in double) and SiLU's must stay accurate too. In the
// tail the oracle uses the identity 1 + tanh(u) = 2 / (1 + exp(-2u)).
TEST(Activations, MatchDoubleFormulasIncludingTails) {
  for (double x = -9.0; x <= 9.0; x += 0.0137) {
    const float xf = float(x);
    const double xd = xf, u = 0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd);
    const double gelu = u > -1.0 ? 0.5 * xd * (1.0 + std::tanh(u)) : xd / (1.0 + std::exp(-2 * u));
    const double silu = xd / (1.0 + std::exp(-xd));
    EXPECT_NEAR(math::gelu_tanh(xf), gelu, 2e-5 * std::fabs(gelu) + 1e-30) << "x=" << x;
    EXPECT_NEAR(math::silu(xf), silu, 1e-6 * std::fabs(silu) + 1e-30) << "x=" << x;
  }
  // Far tails: finite (exp_approx saturates instead of overflowing, so no inf * 0 = NaN).
  EXPECT_NEAR(math::gelu_tanh(-100.0f), 0.0f, 1e-30f);
  EXPECT_EQ(math::gelu_tanh(100.0f), 100.0f);
  EXPECT_EQ(math::gelu_tanh_grad(100.0f), 1.0f);
  EXPECT_NEAR(math::gelu_tanh_grad(-100.0f), 0.0f, 1e-30f);
  EXPECT_NEAR(math::silu_grad(-200.0f), 0.0f, 1e-30f);
}

TEST(Activations, KnownValues) {
  EXPECT_EQ(math::gelu_tanh(0.0f), 0.0f);
  EXPECT_NEAR(math::gelu_tanh(1.0f), 0.8411920f, 1e-6f);  // 0.5 (1 + tanh(0.79788 * 1.044715))
  EXPECT_NEAR(math::gelu_tanh(-1.0f), -0.1588080f, 1e-6f);
  EXPECT_NEAR(math::silu(1.0f), 0.7310586f, 1e-6f);  // 1 / (1 + e^-1)
  EXPECT_EQ(math::sigmoid(0.0f), 0.5f);
}

TEST(Rope, InverseFrequenciesAndRotation) {
  EXPECT_EQ(math::rope_inv_freq(0, 64, 10000.0f), 1.0f);
  EXPECT_NEAR(math::rope_inv_freq(16, 64, 10000.0f), 0.01f, 1e-8f);  // 10000^(-1/2)
  float a = 1.0f, b = 0.0f;
  math::rope_rotate(a, b, std::cos(0.5f), std::sin(0.5f));
  EXPECT_FLOAT_EQ(a, std::cos(0.5f));
  EXPECT_FLOAT_EQ(b, std::sin(0.5f));
}

// LLaMA-3.1 scaling against the formula in double (Megatron-Core's apply_rope_scaling): the
// high frequencies kept, the low ones divided by the factor, the band between interpolated.
TEST(Rope, Llama31ScalingMatchesTheFormulaInEveryBand) {
  math::RopeFrequencies f(500000.0f);
  f.factor = 8.0f;
  const int64_t Dh = 8;
  int kept = 0, stretched = 0, smoothed = 0;
  for (int64_t i = 0; i < Dh / 2; ++i) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * i / Dh);
    const double wavelen = 2 * M_PI / inv;
    double want = inv;
    if (wavelen > 8192.0) {
      want = inv / 8.0, ++stretched;
    } else if (wavelen >= 2048.0) {
      const double s = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1 - s) * inv / 8.0 + s * inv, ++smoothed;
    } else {
      ++kept;
    }
    EXPECT_NEAR(math::rope_inv_freq(i, Dh, f), want, 2e-6 * want) << i;
    EXPECT_EQ(math::rope_inv_freq(i, Dh, 500000.0f) == math::rope_inv_freq(i, Dh, f),
              wavelen < 2048.0)
        << i;
  }
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(stretched, 1);
  EXPECT_EQ(smoothed, 1);
}

// YaRN against its definition in double (Megatron-Core's YarnRotaryEmbedding, transformers'
// _compute_yarn_parameters): correction range from beta_fast/beta_slow over the original
// context (rounded out to whole pairs, or not), pairs below it keep their frequency, pairs above
// are divided by the factor, the ones between blend linearly; the concentration is
// 0.1 ln(factor) + 1, or the ratio of the mscale and mscale_all_dim ones when both are set.
TEST(Rope, YarnMatchesTheFormula) {
  const double theta = 10000.0, pi = 3.14159265358979323846;
  for (const bool round : {true, false}) {
    for (const int64_t Dh : {8, 64, 128}) {
      math::YarnParams y;
      y.factor = 4.0;
      y.original_max_positions = 4096.0;
      y.round_to_int = round;
      const math::RopeFrequencies f = math::yarn_frequencies(float(theta), Dh, y);
      auto dim_of = [&](double rot) {
        return Dh * std::log(4096.0 / (rot * 2 * pi)) / (2 * std::log(theta));
      };
      double low = dim_of(32.0), high = dim_of(1.0);
      if (round) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, double(Dh - 1));
      int kept = 0, interpolated = 0, blended = 0;
      for (int64_t i = 0; i < Dh / 2; ++i) {
        const double inv = 1.0 / std::pow(theta, 2.0 * i / Dh);
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double want = inv / 4.0 * ramp + inv * (1 - ramp);
        EXPECT_NEAR(math::rope_inv_freq(i, Dh, f), want, 3e-6 * want) << "Dh " << Dh << " i " << i;
        (ramp == 0 ? kept : ramp == 1 ? interpolated : blended) += 1;
      }
      EXPECT_GT(kept, 0) << Dh;
      EXPECT_GT(interpolated, 0) << Dh;
      if (Dh >= 64) {
        EXPECT_GT(blended, 0) << Dh;
      }
      EXPECT_FLOAT_EQ(f.attention_scale, float(0.1 * std::log(4.0) + 1.0));
    }
  }
  math::YarnParams ratio;
  ratio.factor = 40.0;
  ratio.original_max_positions = 4096.0;
  ratio.mscale = 1.0;
  ratio.mscale_all_dim = 0.707;
  EXPECT_NEAR(math::yarn_concentration(ratio),
              (0.1 * std::log(40.0) + 1.0) / (0.0707 * std::log(40.0) + 1.0), 1e-12);
  ratio.mscale_all_dim.reset();  // one of them alone: the plain concentration
  EXPECT_NEAR(math::yarn_concentration(ratio), 0.1 * std::log(40.0) + 1.0, 1e-12);
  ratio.factor = 1.0;  // no extension, no concentration
  EXPECT_EQ(math::yarn_concentration(ratio), 1.0);
}

TEST(ExpApprox, CloseToExpOverTheRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const float xf = float(x);
    const double want = std::exp(double(xf));
    worst = std::max(worst, std::fabs(math::exp_approx(xf) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // ~2.5 float ulp
  EXPECT_EQ(math::exp_approx(0.0f), 1.0f);
  EXPECT_EQ(math::exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(math::exp_approx(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(math::exp_approx(std::nanf(""))));
}

}  // namespace
}  // namespace megatron
