#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kMaxHalf = 512;
constexpr int kThreads = 256;

struct InvFreq {
  float v[kMaxHalf];
};

// One thread per (token, rotated head, pair i): S * B * G * (H/G + 1) * (Dh/2) threads.
template <typename T>
__global__ void rope_kernel(T* qkv, int64_t S, int64_t B, int64_t G, int64_t per_group, int64_t Dh,
                            int64_t half, int64_t position_offset, const int32_t* positions,
                            float sin_sign, float scale, InvFreq freq) {
  const int64_t rotated = per_group - 1;  // the group's query heads and its key head
  const int64_t total = S * B * G * rotated * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    int64_t rest = idx / half;
    const int64_t h = rest % rotated;
    rest /= rotated;
    const int64_t g = rest % G;
    const int64_t sb = rest / G;  // s * B + b
    const int64_t pos = positions != nullptr ? int64_t(positions[sb]) : position_offset + sb / B;
    const float angle = static_cast<float>(pos) * freq.v[i];
    float sn, c;
    sincosf(angle, &sn, &c);
    c *= scale;
    sn *= scale;
    T* x = qkv + ((sb * G + g) * per_group + h) * Dh;  // (pairs i, i + half of its first 2 half)
    float a = to_float(x[i]), b = to_float(x[i + half]);
    math::rope_rotate(a, b, c, sin_sign * sn);
    x[i] = from_float<T>(a);
    x[i + half] = from_float<T>(b);
  }
}

template <typename T>
void rope_apply(const AttentionShape& shape, T* qkv, const math::RopeFrequencies& rope,
                int64_t position_offset, const int32_t* positions, float sin_sign,
                cudaStream_t stream) {
  const int64_t S = shape.S, B = shape.B, H = shape.H, G = shape.G, Dh = shape.Dh;
  const int64_t R = rope.rotated_dims(Dh);  // the turning part of each head
  MT_CHECK(R % 2 == 0 && R <= Dh && G > 0 && H % G == 0, "rope: bad shape Dh=", Dh, " H=", H,
           " G=", G, " rotary dims ", R);
  const int64_t half = R / 2;
  MT_CHECK(half <= kMaxHalf, "rope (CUDA): head size ", Dh, " above ", 2 * kMaxHalf);
  const int64_t total = S * B * G * (H / G + 1) * half;
  if (total == 0) return;
  InvFreq freq{};
  for (int64_t i = 0; i < half; ++i) freq.v[i] = math::rope_inv_freq(i, R, rope);
  rope_kernel<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      qkv, S, B, G, H / G + 2, Dh, half, position_offset, positions, sin_sign, rope.attention_scale,
      freq);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void rope_forward(const AttentionShape& shape, T* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions, cudaStream_t stream) {
  rope_apply(shape, qkv, rope, position_offset, positions, 1.0f, stream);
}

template <typename T>
void rope_backward(const AttentionShape& shape, T* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions, cudaStream_t stream) {
  rope_apply(shape, dqkv, rope, position_offset, positions, -1.0f, stream);
}

#define MT_INSTANTIATE(T)                                                                          \
  template void rope_forward<T>(const AttentionShape&, T*, const math::RopeFrequencies&, int64_t,  \
                                const int32_t*, cudaStream_t);                                     \
  template void rope_backward<T>(const AttentionShape&, T*, const math::RopeFrequencies&, int64_t, \
                                 const int32_t*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
