#pragma once
// Pieces the unfused (attention.cpp) and flash (flash_attention.cpp) CPU attention share, so
// both read the fused QKV buffer and draw dropout masks identically.

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu::attention_detail {

// Addressing into the fused qkv [S, B, G, (H/G + 2), Dh] and out [S, B, H, Dh] buffers. Each
// head is a strided [S, Dh] matrix whose row stride (ld) is one token, so BLAS reads it in place.
struct Layout {
  int64_t S, B, H, G, Dh, heads_per_group, ld_qkv, ld_out;

  explicit Layout(const AttentionShape& s)
      : S(s.S),
        B(s.B),
        H(s.H),
        G(s.G),
        Dh(s.Dh),
        heads_per_group(s.G > 0 ? s.H / s.G : 0),
        ld_qkv(s.B * (s.H + 2 * s.G) * s.Dh),
        ld_out(s.B * s.H * s.Dh) {}
  int64_t group_offset(int64_t b, int64_t g) const {
    return b * (H + 2 * G) * Dh + g * (heads_per_group + 2) * Dh;
  }
  int64_t q(int64_t b, int64_t h) const {
    return group_offset(b, h / heads_per_group) + (h % heads_per_group) * Dh;
  }
  int64_t k(int64_t b, int64_t g) const { return group_offset(b, g) + heads_per_group * Dh; }
  int64_t v(int64_t b, int64_t g) const { return k(b, g) + Dh; }
  int64_t out(int64_t b, int64_t h) const { return (b * H + h) * Dh; }
  // Keys a row block ending at r1 can see.
  int64_t key_end(int64_t r1, bool causal) const { return causal ? r1 : S; }
};

// `op` names the caller in the error ("attention", "flash_attention").
inline void check_shape(const char* op, const AttentionShape& s, const AttentionOptions& opt) {
  MT_CHECK(s.S >= 0 && s.B >= 0 && s.Dh > 0 && s.G > 0 && s.H % s.G == 0, op, ": bad shape S=", s.S,
           " B=", s.B, " H=", s.H, " G=", s.G, " Dh=", s.Dh);
  MT_CHECK(opt.dropout_p >= 0.0f && opt.dropout_p < 1.0f, op, ": dropout_p ", opt.dropout_p,
           " outside [0, 1)");
  MT_CHECK(opt.window >= 0 && (opt.window == 0 || opt.causal), op, ": sliding window ", opt.window,
           " needs causal attention and must be >= 0");
}

// The first key query i sees: 0, or with a sliding window the oldest one inside it.
inline int64_t first_key(const AttentionOptions& opt, int64_t i) {
  return opt.window > 0 ? std::max<int64_t>(0, i - opt.window + 1) : 0;
}

// Philox index of element (0, 0) of local head (b, h): a function of the global batch and head,
// so masks do not depend on how batch and heads are split.
inline uint64_t dropout_base(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t total_heads = s.total_heads > 0 ? s.total_heads : s.H;
  return uint64_t(((s.batch_offset + b) * total_heads + s.head_offset + h) * s.S * s.S);
}

}  // namespace megatron::kernels::cpu::attention_detail
