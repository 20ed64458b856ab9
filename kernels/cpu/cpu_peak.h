#pragma once
// The hardware's arithmetic peak on this CPU, measured with register-only loops (no memory
// traffic, independent accumulators, every OpenMP thread): the honest denominator for MFU.
//  - fp32: the widest FMA (AVX-512 zmm, AVX2 ymm; SSE mul+add without FMA).
//  - bf16: AMX TDPBF16PS tiles where usable, else AVX-512 VDPBF16PS, else the fp32 figure (bf16
//    math then runs on the fp32 units).
// Megatron's FLOP count counts a multiply-add as 2 FLOPs; so do these loops.
#include <string>

namespace megatron::kernels::cpu {

struct PeakFlops {
  std::string isa;   // the instructions that reached it, e.g. "avx512 fma", "amx_bf16"
  double flops = 0;  // FLOP/s over all OpenMP threads
};

PeakFlops measure_fp32_peak();
PeakFlops measure_bf16_peak();

}  // namespace megatron::kernels::cpu
