#pragma once
// Counter-based Philox4x32-10 (Salmon et al., SC'11). A random value is a pure function of
// (seed, counter), so the value drawn for global element i never depends on how a tensor is
// sharded: a shard starting at global offset o uses counters o, o+1, ...
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace megatron::philox {

struct U32x4 {
  uint32_t v[4];
};

MT_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// One 128-bit block for a 128-bit counter (c0..c3) and 64-bit key.
MT_HD U32x4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                          uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c0, hi0, lo0);
    mulhilo(kM1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return U32x4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 bits of precision.
MT_HD float to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// The four random words of block `block` of the stream (`seed`, `stream`): elements
// 4 * block .. 4 * block + 3. Kernels that fill a range use it to compute each block once.
MT_HD U32x4 random_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                       static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Random 32-bit word for element `index` of the stream (`seed`, `stream`). Each block gives
// four words, so element i uses word i % 4 of block i / 4.
MT_HD uint32_t random_u32(uint64_t seed, uint64_t stream, uint64_t index) {
  return random_block(seed, stream, index >> 2).v[index & 3];
}

MT_HD float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return to_unit_float(random_u32(seed, stream, index));
}

// Standard normal via Box-Muller from two words of the same block (element-indexed, so
// shard-independent).
MT_HD float normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const U32x4 r = philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
                                static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const float u1 = (static_cast<float>(r.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = to_unit_float(r.v[1]);
  const float radius = sqrtf(-2.0f * logf(u1));
  return radius * cosf(6.283185307179586f * u2);
}

}  // namespace megatron::philox
