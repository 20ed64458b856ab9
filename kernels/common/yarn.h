#pragma once
// YaRN's host-side constants (Peng et al. 2023; Megatron-Core's YarnRotaryEmbedding, Hugging
// Face's _compute_yarn_parameters): the correction range of rotary pairs between pure
// extrapolation and pure interpolation, and the concentration factor on cos/sin. Computed in
// double as both do in Python, then stored in math::RopeFrequencies for the kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "kernels/common/numeric.h"

namespace megatron::math {

struct YarnParams {
  double factor = 1.0;                // context extension (yarn_rotary_scaling_factor)
  double original_max_positions = 0;  // the pretraining context
  double beta_fast = 32.0, beta_slow = 1.0;
  std::optional<double> mscale, mscale_all_dim;  // both set: their ratio of concentrations
  bool round_to_int = true;                      // correction range to whole pairs
};

// 0.1 * mscale * ln(scale) + 1 above 1, else 1.
inline double yarn_mscale(double scale, double mscale = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

inline double yarn_concentration(const YarnParams& y) {
  if (!y.mscale || !y.mscale_all_dim) return yarn_mscale(y.factor);
  return yarn_mscale(y.factor, *y.mscale) / yarn_mscale(y.factor, *y.mscale_all_dim);
}

// The frequencies of rope over `dim` rotary channels (the head dimension) with YaRN.
inline RopeFrequencies yarn_frequencies(float theta, int64_t dim, const YarnParams& y) {
  const double pi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(y.original_max_positions / (rotations * 2 * pi)) /
           (2 * std::log(static_cast<double>(theta)));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.round_to_int) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // no singular ramp
  RopeFrequencies f(theta);
  f.yarn_factor = static_cast<float>(y.factor);
  f.yarn_low = static_cast<float>(low);
  f.yarn_range = static_cast<float>(high - low);
  f.attention_scale = static_cast<float>(yarn_concentration(y));
  return f;
}

}  // namespace megatron::math
