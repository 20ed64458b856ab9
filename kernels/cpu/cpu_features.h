#pragma once
// What this x86-64 CPU can execute, from its CPUID feature bits and the OS's XSAVE state (XCR0),
// never from a table of model numbers. The GEMM path, the peak measurement and the startup
// report all decide from this one description.
#include <string>

namespace megatron::kernels::cpu {

struct CpuFeatures {
  std::string vendor, model_name;
  int family = 0, model = 0;
  bool fma = false, avx2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, amx_tile = false, amx_bf16 = false;
  bool os_avx = false, os_avx512 = false, os_amx = false;  // the OS saves these registers

  // Usable instruction sets: the CPU has them and the OS enables their state.
  bool has_avx2_fma() const { return avx2 && fma && os_avx; }
  bool has_avx512() const { return avx512f && avx512bw && avx512vl && avx512dq && os_avx512; }
  bool has_avx512_bf16() const { return has_avx512() && avx512_bf16; }
  bool has_amx_bf16() const { return has_avx512() && amx_tile && amx_bf16 && os_amx; }
  // The widest fp32 FMA: "avx512", "avx2" or "sse" (no FMA).
  std::string widest_fma_isa() const;
  // "avx512 avx512_bf16 amx_bf16 avx2 fma" (the usable ones).
  std::string isa_list() const;
};

const CpuFeatures& cpu_features();  // detected once

// This build's own kernels are compiled for the build machine (MEGATRON_CPU_ARCH, default
// -march=native): a CPU without the instruction sets they were compiled with would die of
// SIGILL in the first kernel. Throws a message naming what is missing and how to rebuild.
void check_compiled_isa();
// The instruction sets the build was compiled with that `f` lacks ("avx512f, avx512bw"; empty
// when it has them all): what check_compiled_isa reports for this CPU.
std::string missing_compiled_isa(const CpuFeatures& f);

// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM); true when
// granted or already granted. Needed before any AMX instruction (our peak loop, oneDNN's kernels).
bool request_amx_permission();

}  // namespace megatron::kernels::cpu
