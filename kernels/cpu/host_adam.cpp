#include "kernels/cpu/host_adam.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/cpu_features.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

// One element, in adamw_update's order (no contraction: see the header).
inline void scalar_update(float& param, float grad, float& m, float& v,
                          const math::AdamWParams& p) {
  const float one_minus_b1 = 1.0f - p.beta1, one_minus_b2 = 1.0f - p.beta2;
  m = p.beta1 * m + one_minus_b1 * grad;
  v = p.beta2 * v + one_minus_b2 * grad * grad;
  const float m_hat = m / p.bias_correction1;
  const float v_hat = v / p.bias_correction2;
  param -= p.lr * (m_hat / (std::sqrt(v_hat) + p.eps) + p.weight_decay * param);
}

void scalar_step(float* param, const float* grad, float* m, float* v, int64_t begin, int64_t n,
                 const math::AdamWParams& p) {
  for (int64_t i = begin; i < n; ++i) scalar_update(param[i], grad[i], m[i], v[i], p);
}

__attribute__((target("avx2"))) void avx2_step(float* param, const float* grad, float* m, float* v,
                                               int64_t n, const math::AdamWParams& p) {
  const __m256 b1 = _mm256_set1_ps(p.beta1), b2 = _mm256_set1_ps(p.beta2);
  const __m256 c1 = _mm256_set1_ps(1.0f - p.beta1), c2 = _mm256_set1_ps(1.0f - p.beta2);
  const __m256 bc1 = _mm256_set1_ps(p.bias_correction1), bc2 = _mm256_set1_ps(p.bias_correction2);
  const __m256 lr = _mm256_set1_ps(p.lr), eps = _mm256_set1_ps(p.eps);
  const __m256 wd = _mm256_set1_ps(p.weight_decay);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(grad + i);
    __m256 mm = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i), w = _mm256_loadu_ps(param + i);
    mm = _mm256_add_ps(_mm256_mul_ps(b1, mm), _mm256_mul_ps(c1, g));
    vv = _mm256_add_ps(_mm256_mul_ps(b2, vv), _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
    const __m256 m_hat = _mm256_div_ps(mm, bc1), v_hat = _mm256_div_ps(vv, bc2);
    const __m256 ratio = _mm256_div_ps(m_hat, _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps));
    w = _mm256_sub_ps(w, _mm256_mul_ps(lr, _mm256_add_ps(ratio, _mm256_mul_ps(wd, w))));
    _mm256_storeu_ps(m + i, mm);
    _mm256_storeu_ps(v + i, vv);
    _mm256_storeu_ps(param + i, w);
  }
  scalar_step(param, grad, m, v, i, n, p);
}

__attribute__((target("avx512f"))) void avx512_step(float* param, const float* grad, float* m,
                                                    float* v, int64_t n,
                                                    const math::AdamWParams& p) {
  const __m512 b1 = _mm512_set1_ps(p.beta1), b2 = _mm512_set1_ps(p.beta2);
  const __m512 c1 = _mm512_set1_ps(1.0f - p.beta1), c2 = _mm512_set1_ps(1.0f - p.beta2);
  const __m512 bc1 = _mm512_set1_ps(p.bias_correction1), bc2 = _mm512_set1_ps(p.bias_correction2);
  const __m512 lr = _mm512_set1_ps(p.lr), eps = _mm512_set1_ps(p.eps);
  const __m512 wd = _mm512_set1_ps(p.weight_decay);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(grad + i);
    __m512 mm = _mm512_loadu_ps(m + i), vv = _mm512_loadu_ps(v + i), w = _mm512_loadu_ps(param + i);
    mm = _mm512_add_ps(_mm512_mul_ps(b1, mm), _mm512_mul_ps(c1, g));
    vv = _mm512_add_ps(_mm512_mul_ps(b2, vv), _mm512_mul_ps(_mm512_mul_ps(c2, g), g));
    const __m512 m_hat = _mm512_div_ps(mm, bc1), v_hat = _mm512_div_ps(vv, bc2);
    // maskz with every lane: GCC 12 warns of an uninitialised operand inside _mm512_sqrt_ps.
    const __m512 root = _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), v_hat);
    const __m512 ratio = _mm512_div_ps(m_hat, _mm512_add_ps(root, eps));
    w = _mm512_sub_ps(w, _mm512_mul_ps(lr, _mm512_add_ps(ratio, _mm512_mul_ps(wd, w))));
    _mm512_storeu_ps(m + i, mm);
    _mm512_storeu_ps(v + i, vv);
    _mm512_storeu_ps(param + i, w);
  }
  scalar_step(param, grad, m, v, i, n, p);
}

}  // namespace

std::string_view host_adam_isa_name(HostAdamIsa isa) {
  switch (isa) {
    case HostAdamIsa::Scalar:
      return "scalar";
    case HostAdamIsa::Avx2:
      return "avx2";
    case HostAdamIsa::Avx512:
      return "avx512";
  }
  return "?";
}

HostAdamIsa host_adam_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.has_avx512()) return HostAdamIsa::Avx512;
  if (f.has_avx2_fma()) return HostAdamIsa::Avx2;
  return HostAdamIsa::Scalar;
}

void host_adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                     const math::AdamWParams& p, HostAdamIsa isa) {
  MT_CHECK(static_cast<int>(isa) <= static_cast<int>(host_adam_isa()),
           "host AdamW: ", host_adam_isa_name(isa), " requested on a CPU that runs at most ",
           host_adam_isa_name(host_adam_isa()));
  switch (isa) {
    case HostAdamIsa::Avx512:
      avx512_step(param, grad, m, v, n, p);
      return;
    case HostAdamIsa::Avx2:
      avx2_step(param, grad, m, v, n, p);
      return;
    case HostAdamIsa::Scalar:
      scalar_step(param, grad, m, v, 0, n, p);
      return;
  }
}

}  // namespace megatron::kernels::cpu
