#pragma once
// Element-wise math shared by CPU and CUDA kernels: exp, GELU (tanh), SiLU, RoPE angles,
// bf16/fp16 rounding, the AdamW update. Every CPU test of these covers the CUDA path too.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/host_device.h"

namespace megatron::math {

// expf as plain float arithmetic, so loops over it vectorize on the CPU (libm's expf only does
// under -ffast-math) and CPU and CUDA evaluate the same polynomial. Cephes-style reduction
// x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial: within ~2 ulp of exp on [-87.3, 88];
// exactly 0 below (including -inf), clamped to exp(88) above, NaN stays NaN. The rounding trick
// needs IEEE float semantics (no -ffast-math reassociation).
MT_HD float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMin = -87.33654f;     // ln(2^-126): the smallest normal result
  const float xc = x > 88.0f ? 88.0f : (x < kMin ? kMin : x);
  const float t = xc * kLog2e + kRound;  // the low mantissa bits of t hold n = round(x log2 e)
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t t_bits, kround_bits;
  memcpy(&t_bits, &t, 4);
  const float round_const = kRound;
  memcpy(&kround_bits, &round_const, 4);
  const uint32_t scale_bits = (t_bits - kround_bits + 127u) << 23;  // 2^n
  float scale;
  memcpy(&scale, &scale_bits, 4);
  return x < kMin ? 0.0f : p * scale;
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// GELU, tanh approximation: 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u): the same function without the cancellation of 1 + tanh(u) for
// negative x, and through exp_approx so it vectorizes.
MT_HD float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return x / (1.0f + exp_approx(-2.0f * u));
}

// GELU exactly: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (PyTorch's default F.gelu, Megatron's
// default, Hugging Face's "gelu" that BERT uses).
MT_HD float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
MT_HD float gelu_erf_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  return cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);  // + x phi(x)
}

MT_HD float gelu_tanh_grad(float x) {
  const float x2 = x * x;
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x2 * x);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x2);
  const float e = exp_approx(-2.0f * u);
  const float s = 1.0f / (1.0f + e);       // sigmoid(2u) = 0.5 (1 + tanh(u))
  return s + 2.0f * x * (e * s * s) * du;  // d sigmoid(2u)/du = 2 s (1 - s), 1 - s = e s
}

// Which GELU a layer computes.
enum class Gelu : uint8_t { Tanh, Erf };
MT_HD float gelu(float x, Gelu kind) { return kind == Gelu::Erf ? gelu_erf(x) : gelu_tanh(x); }
MT_HD float gelu_grad(float x, Gelu kind) {
  return kind == Gelu::Erf ? gelu_erf_grad(x) : gelu_tanh_grad(x);
}

MT_HD float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }
MT_HD float silu(float x) { return x * sigmoid(x); }
MT_HD float silu_grad(float x) {
  const float e = exp_approx(-x);
  const float s = 1.0f / (1.0f + e);
  return s * (1.0f + x * (e * s));  // s (1 + x (1 - s)), 1 - s = e s
}

// Soft-capping (Gemma 2's attention scores and logits): cap tanh(x / cap), and its derivative
// from the capped value y: 1 - (y / cap)^2.
MT_HD float softcap(float x, float cap) { return cap * tanhf(x / cap); }
MT_HD float softcap_grad_from_output(float y, float cap) {
  const float t = y / cap;
  return 1.0f - t * t;
}

// Quick GELU, x sigmoid(1.702 x) (Megatron-Core's quick_gelu; GPT-OSS's gate with alpha 1.702).
constexpr float kQuickGeluAlpha = 1.702f;
MT_HD float quick_gelu(float x) { return x * sigmoid(kQuickGeluAlpha * x); }
MT_HD float quick_gelu_grad(float x) {
  const float s = sigmoid(kQuickGeluAlpha * x);
  return s + kQuickGeluAlpha * x * s * (1.0f - s);
}

// The gate activation of a gated linear unit: act(gate) * up. SwiGLU's SiLU (LLaMA), GeGLU's
// tanh-approximated GELU (Gemma's gelu_pytorch_tanh) or quick GELU (GPT-OSS's).
enum class GluGate : uint8_t { Silu, GeluTanh, QuickGelu };
MT_HD float glu_gate(float x, GluGate g) {
  return g == GluGate::Silu ? silu(x) : g == GluGate::GeluTanh ? gelu_tanh(x) : quick_gelu(x);
}
MT_HD float glu_gate_grad(float x, GluGate g) {
  return g == GluGate::Silu       ? silu_grad(x)
         : g == GluGate::GeluTanh ? gelu_tanh_grad(x)
                                  : quick_gelu_grad(x);
}
// A gated linear unit: act(min(gate, limit)) * (clamp(up, -limit, limit) + offset); limit 0: no
// clamps (Megatron-Core's activation_func_clamp_value and glu_linear_offset; GPT-OSS: quick
// GELU, limit 7, offset 1). The clamps pass the gradient where the value is within them
// (bounds included, as torch.clamp).
struct Glu {
  GluGate gate = GluGate::Silu;
  float limit = 0.0f, offset = 0.0f;
  constexpr Glu() = default;
  constexpr Glu(GluGate g, float clamp_limit = 0.0f, float linear_offset = 0.0f)  // NOLINT
      : gate(g), limit(clamp_limit), offset(linear_offset) {}
  constexpr bool plain() const { return limit == 0.0f && offset == 0.0f; }
};
// One element of a (possibly clamped, offset) gated linear unit, shared by the CPU and CUDA
// kernels: the value and, from the inputs g0, u0 and the output's gradient d, the two input
// gradients.
MT_HD float glu_value(float g, float u, const Glu& glu) {
  if (glu.limit > 0.0f) g = fminf(g, glu.limit), u = fminf(fmaxf(u, -glu.limit), glu.limit);
  return glu_gate(g, glu.gate) * (u + glu.offset);
}
MT_HD void glu_grads(float g0, float u0, float d, const Glu& glu, float& dg, float& du) {
  const bool clamp = glu.limit > 0.0f;
  const float g = clamp ? fminf(g0, glu.limit) : g0;
  const float u = clamp ? fminf(fmaxf(u0, -glu.limit), glu.limit) : u0;
  const float pass_g = !clamp || g0 <= glu.limit ? 1.0f : 0.0f;
  const float pass_u = !clamp || fabsf(u0) <= glu.limit ? 1.0f : 0.0f;
  dg = d * (u + glu.offset) * glu_gate_grad(g, glu.gate) * pass_g;
  du = d * glu_gate(g, glu.gate) * pass_u;
}

// One AdamW step for one element (decoupled weight decay, bias-corrected moments).
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;  // 1 - beta1^step
  float bias_correction2;  // 1 - beta2^step
};

MT_HD void adamw_update(float& param, float grad, float& m, float& v, const AdamWParams& p) {
  m = p.beta1 * m + (1.0f - p.beta1) * grad;
  v = p.beta2 * v + (1.0f - p.beta2) * grad * grad;
  const float m_hat = m / p.bias_correction1;
  const float v_hat = v / p.bias_correction2;
  param -= p.lr * (m_hat / (sqrtf(v_hat) + p.eps) + p.weight_decay * param);
}

// The rotary frequencies: base theta and, optionally, LLaMA-3.1's frequency scaling
// (Megatron-Core's apply_rope_scaling, Hugging Face's rope_type "llama3"): wavelengths longer
// than original_max_positions / low_freq_factor are stretched by `factor`, shorter than
// original_max_positions / high_freq_factor kept, and those between interpolated smoothly.
// A plain float converts to the unscaled frequencies of that theta.
// Linear position interpolation (Megatron's rotary_seq_len_interpolation_factor, Hugging Face's
// rope_type "linear") divides every frequency by linear_factor, as Hugging Face does (inv_freq /=
// factor), i.e. positions are compressed by it.
// YaRN (Megatron-Core's position_embedding_type yarn, Hugging Face's rope_type "yarn"): pair i
// blends the interpolated frequency (/ yarn_factor) with the original one by a ramp rising over
// [yarn_low, yarn_low + yarn_range) (the correction range; see kernels/common/yarn.h), and the
// cosines and sines are multiplied by attention_scale (YaRN's concentration factor).
struct RopeFrequencies {
  float theta = 10000.0f;
  float factor = 0.0f;  // 0: no scaling
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f, original_max_positions = 8192.0f;
  float linear_factor = 1.0f;  // 1: no interpolation
  float yarn_factor = 0.0f;    // 0: no YaRN
  float yarn_low = 0.0f, yarn_range = 1.0f;
  float attention_scale = 1.0f;  // cos and sin x this
  // LongRoPE: pair i's frequency is 1 / (pair_factor[i] * theta^(2i/Dh)); [Dh / 2] floats in host
  // memory (the CUDA kernels take frequencies computed on the host), or null.
  const float* pair_factor = nullptr;
  // Partial rotary embeddings (Megatron's rotary_percent; HF partial_rotary_factor): only the
  // first rotary_dims of each head turn, as a head of that size would (pairs i, i + dims / 2 and
  // frequencies over dims); the rest pass through. 0: the whole head.
  int64_t rotary_dims = 0;
  MT_HD RopeFrequencies(float theta_ = 10000.0f) : theta(theta_) {}  // NOLINT: implicit
  MT_HD int64_t rotated_dims(int64_t head_dim) const {
    return rotary_dims > 0 ? rotary_dims : head_dim;
  }
  MT_HD bool scaled() const { return factor > 0.0f; }
};

// RoPE, "rotate half" layout: rotary pair i of a head of size Dh turns by
// position * theta^(-2i/Dh) (then scaled, see RopeFrequencies). Computed in fp32 step by step as
// Hugging Face does (inv_freq, then position * inv_freq), so imported checkpoints see the same
// angles.
MT_HD float rope_inv_freq(int64_t i, int64_t Dh, const RopeFrequencies& rope) {
  const float pos_freq = powf(rope.theta, static_cast<float>(2 * i) / static_cast<float>(Dh));
  if (rope.pair_factor != nullptr) return 1.0f / (rope.pair_factor[i] * pos_freq);
  const float inv = 1.0f / pos_freq;
  if (rope.yarn_factor > 0.0f) {
    // Hugging Face's order of fp32 operations: the extrapolation weight is 1 - ramp and the
    // interpolated frequency 1 / (factor * pos_freq).
    const float interpolated = 1.0f / (rope.yarn_factor * pos_freq);
    const float ramp =
        fminf(fmaxf((static_cast<float>(i) - rope.yarn_low) / rope.yarn_range, 0.0f), 1.0f);
    const float keep = 1.0f - ramp;
    return interpolated * (1.0f - keep) + inv * keep;
  }
  if (rope.linear_factor != 1.0f) return inv / rope.linear_factor;
  if (!rope.scaled()) return inv;
  const float wavelen = 6.283185307179586f / inv;
  const float low_wavelen = rope.original_max_positions / rope.low_freq_factor;
  const float high_wavelen = rope.original_max_positions / rope.high_freq_factor;
  if (wavelen < high_wavelen) return inv;
  if (wavelen > low_wavelen) return inv / rope.factor;
  const float smooth = (rope.original_max_positions / wavelen - rope.low_freq_factor) /
                       (rope.high_freq_factor - rope.low_freq_factor);
  return (1.0f - smooth) * inv / rope.factor + smooth * inv;
}

// Dynamic NTK scaling's rotary base for a sequence spanning seq_len > max_positions positions,
// in the fp32 steps transformers takes (its sequence length is a tensor there).
inline float dynamic_ntk_theta(float theta, float factor, int64_t seq_len, int64_t max_positions,
                               int64_t Dh) {
  float x = factor * static_cast<float>(seq_len);
  x = x / static_cast<float>(max_positions);
  x = x - (factor - 1.0f);
  x = powf(x, static_cast<float>(static_cast<double>(Dh) / static_cast<double>(Dh - 2)));
  return theta * x;
}

// Rotates the pair (x[i], x[i + Dh/2]) by the angle with cosine c and sine s (backward: -s).
MT_HD void rope_rotate(float& x1, float& x2, float c, float s) {
  const float a = x1, b = x2;
  x1 = a * c - b * s;
  x2 = b * c + a * s;
}

// Round-to-nearest-even fp32 -> bf16 (NaN kept quiet).
MT_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

MT_HD float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE fp16 conversions with round-to-nearest-even, subnormals and inf/NaN.
MT_HD uint16_t float_to_fp16_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (mag < 0x38800000u) {                                               // subnormal or zero
    if (mag < 0x33000000u) return static_cast<uint16_t>(sign);           // below half min subnormal
    const uint32_t exp = mag >> 23;
    const uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // value = mant * 2^(exp-150); fp16 subnormal unit 2^-24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((mag >> 13) - (112u << 10));
  const uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

MT_HD float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // normalise a subnormal
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

}  // namespace megatron::math
