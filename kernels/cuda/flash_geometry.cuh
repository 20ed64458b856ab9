#pragma once
// What the flash-attention kernels share (flash_attention.cu, flash_attention_tc.cu): the
// addressing of the fused qkv and out buffers and the options in device-friendly form.
#include <cstdint>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cuda::flash {

// Addressing of the fused qkv [S, B, G, (H/G + 2), Dh] and out [S, B, H, Dh] buffers (as
// kernels/cpu/attention.cpp) and the Philox index rule of attention.h.
struct Geo {
  int64_t S, B, H, G, Dh, hpg, ld_qkv, ld_out, total_heads, head_offset, batch_offset;
  __host__ __device__ int64_t group_offset(int64_t b, int64_t g) const {
    return b * (H + 2 * G) * Dh + g * (hpg + 2) * Dh;
  }
  __host__ __device__ int64_t q(int64_t b, int64_t h) const {
    return group_offset(b, h / hpg) + (h % hpg) * Dh;
  }
  __host__ __device__ int64_t k(int64_t b, int64_t g) const {
    return group_offset(b, g) + hpg * Dh;
  }
  __host__ __device__ int64_t v(int64_t b, int64_t g) const { return k(b, g) + Dh; }
  __host__ __device__ int64_t out(int64_t b, int64_t h) const { return (b * H + h) * Dh; }
  __device__ uint64_t dropout_base(int64_t b, int64_t h) const {
    return uint64_t(((batch_offset + b) * total_heads + head_offset + h) * S * S);
  }
};

inline Geo geo_of(const AttentionShape& s) {
  Geo L{};
  L.S = s.S;
  L.B = s.B;
  L.H = s.H;
  L.G = s.G;
  L.Dh = s.Dh;
  L.hpg = s.H / s.G;
  L.ld_qkv = s.B * (s.H + 2 * s.G) * s.Dh;
  L.ld_out = s.B * s.H * s.Dh;
  L.total_heads = s.total_heads > 0 ? s.total_heads : s.H;
  L.head_offset = s.head_offset;
  L.batch_offset = s.batch_offset;
  return L;
}

struct Opt {
  float scale, p, keep_scale;
  float softcap;  // > 0: scores soft-capped (flash_block.cu runs it; the other kernels refuse it)
  bool causal, dropout;
  int64_t window;  // sliding window (0: none)
  const uint8_t* key_mask;
  const int32_t* segment_ids;  // [B, S] or null
  uint64_t seed, stream;
};

inline Opt opt_of(const AttentionOptions& o) {
  Opt r{};
  r.scale = o.scale;
  r.softcap = o.softcap;
  r.p = o.dropout_p;
  r.dropout = o.dropout_p > 0.0f;
  r.keep_scale = r.dropout ? 1.0f / (1.0f - o.dropout_p) : 1.0f;
  r.causal = o.causal;
  r.window = o.window;
  r.key_mask = o.key_mask;
  r.segment_ids = o.segment_ids;
  r.seed = o.seed;
  r.stream = o.stream;
  return r;
}

}  // namespace megatron::kernels::cuda::flash
