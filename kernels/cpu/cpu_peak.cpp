#include "kernels/cpu/cpu_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/cpu/cpu_features.h"

namespace megatron::kernels::cpu {
namespace {

// Twelve independent accumulator chains hide the FMA latency (4 cycles x 2 ports needs >= 8).
// Written in assembly so the compiler cannot spill the accumulators to memory.
#define MT_TWELVE(ins, src, acc)                                                                   \
  ins " " src ", %%" acc "0\n\t" ins " " src ", %%" acc "1\n\t" ins " " src ", %%" acc "2\n\t" ins \
      " " src ", %%" acc "3\n\t" ins " " src ", %%" acc "4\n\t" ins " " src ", %%" acc "5\n\t" ins \
      " " src ", %%" acc "6\n\t" ins " " src ", %%" acc "7\n\t" ins " " src ", %%" acc "8\n\t" ins \
      " " src ", %%" acc "9\n\t" ins " " src ", %%" acc "10\n\t" ins " " src ", %%" acc "11\n\t"

#define MT_CLOBBERS                                                                        \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm14", "xmm15", "cc"

constexpr int kChains = 12;

// One vector FMA-like instruction `ins` (vfmadd231ps, vdpbf16ps) on registers of kind `reg`
// (zmm, ymm): both sources zero, so the values stay finite whatever the trip count.
#define MT_VECTOR_PEAK_LOOP(name, ins, reg)                               \
  void name(int64_t n) {                                                  \
    __asm__ volatile(                                                     \
        "vpxor %%xmm14, %%xmm14, %%xmm14\n\t"                             \
        "vpxor %%xmm15, %%xmm15, %%xmm15\n\t" MT_TWELVE(                  \
            "vmovaps", "%%" reg "14",                                     \
            reg) "1:\n\t" MT_TWELVE(ins " %%" reg "14,", "%%" reg "15",   \
                                    reg) "dec %0\n\tjnz 1b\n\tvzeroupper" \
        : "+r"(n)                                                         \
        :                                                                 \
        : MT_CLOBBERS);                                                   \
  }

MT_VECTOR_PEAK_LOOP(loop_avx512_fma, "vfmadd231ps", "zmm")
MT_VECTOR_PEAK_LOOP(loop_avx512_bf16, "vdpbf16ps", "zmm")
MT_VECTOR_PEAK_LOOP(loop_avx2_fma, "vfmadd231ps", "ymm")

// No FMA: a multiply and an add per chain step (2 FLOPs per lane, on separate ports).
void loop_sse(int64_t n) {
  __asm__ volatile("xorps %%xmm14, %%xmm14\n\txorps %%xmm15, %%xmm15\n\t" MT_TWELVE(
                       "movaps", "%%xmm14", "xmm") "1:\n\t" MT_TWELVE("mulps", "%%xmm15", "xmm")
                       MT_TWELVE("addps", "%%xmm14", "xmm") "dec %0\n\tjnz 1b"
                   : "+r"(n)
                   :
                   : MT_CLOBBERS);
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Four 16x16 fp32 accumulator tiles, each fed by two 16x32 bf16 tiles: 16*16*32*2 FLOPs per op.
__attribute__((target("amx-tile,amx-bf16"))) void loop_amx_bf16(int64_t n) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC does not see ldtilecfg read the config: without this barrier it drops the stores above.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t src[16 * 32];
  std::fill(src, src + 16 * 32, uint16_t{0});
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_release();
}

// FLOP/s of `loop` run by every OpenMP thread at once: the best of several ~10 ms rounds, after
// a warm-up round that lets the cores reach their sustained clock.
double measure(void (*loop)(int64_t), double flops_per_iteration) {
  using clock = std::chrono::steady_clock;
  int64_t n = 1000;
  for (;;) {  // calibrate one thread to ~2 ms
    const auto t0 = clock::now();
    loop(n);
    if (std::chrono::duration<double>(clock::now() - t0).count() > 2e-3 || n > (int64_t{1} << 40))
      break;
    n *= 4;
  }
  n *= 5;  // ~10 ms a round
  const int threads = omp_get_max_threads();
  double best = 0;
  for (int round = 0; round < 8; ++round) {
    const auto t0 = clock::now();
#pragma omp parallel num_threads(threads)
    loop(n);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (round > 0) best = std::max(best, flops_per_iteration * double(n) * threads / s);
  }
  return best;
}

}  // namespace

PeakFlops measure_fp32_peak() {
  const CpuFeatures& f = cpu_features();
  if (f.has_avx512()) return {"avx512 fma", measure(loop_avx512_fma, kChains * 16 * 2)};
  if (f.has_avx2_fma()) return {"avx2 fma", measure(loop_avx2_fma, kChains * 8 * 2)};
  return {"sse mul+add", measure(loop_sse, kChains * 4 * 2)};
}

PeakFlops measure_bf16_peak() {
  // The fastest way this CPU has to multiply bf16 numbers: bf16 instructions, or widening to fp32
  // where those are slower (VDPBF16PS issues on one port on some cores) or absent.
  const CpuFeatures& f = cpu_features();
  PeakFlops best = measure_fp32_peak();
  if (f.has_avx512_bf16()) {
    const PeakFlops dp{"avx512_bf16", measure(loop_avx512_bf16, kChains * 32 * 2)};
    if (dp.flops > best.flops) best = dp;
  }
  if (f.has_amx_bf16() && request_amx_permission()) {
    const PeakFlops amx{"amx_bf16", measure(loop_amx_bf16, 4.0 * 16 * 16 * 32 * 2)};
    if (amx.flops > best.flops) best = amx;
  }
  return best;
}

}  // namespace megatron::kernels::cpu
