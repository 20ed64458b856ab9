#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

bool bit(unsigned reg, int i) { return (reg >> i) & 1u; }

uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs v = cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  f.vendor = vendor;
  const Regs l1 = cpuid(1, 0);
  const unsigned base_family = (l1.a >> 8) & 0xf, base_model = (l1.a >> 4) & 0xf;
  f.family =
      static_cast<int>(base_family == 0xf ? base_family + ((l1.a >> 20) & 0xff) : base_family);
  f.model = static_cast<int>(base_family == 0x6 || base_family == 0xf
                                 ? (((l1.a >> 16) & 0xf) << 4) | base_model
                                 : base_model);
  f.fma = bit(l1.c, 12);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  f.os_avx = (xcr & 0x6) == 0x6;                   // SSE + AVX state
  f.os_avx512 = f.os_avx && (xcr & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  f.os_amx = (xcr & 0x60000) == 0x60000;           // XTILECFG + XTILEDATA
  if (v.a >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_tile = bit(l7.d, 24);
    if (l7.a >= 1) f.avx512_bf16 = bit(cpuid(7, 1).a, 5);
  }
  const Regs ext = cpuid(0x80000000u, 0);
  if (ext.a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string s(brand);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    f.model_name = s.substr(
        s.find_first_not_of(' ') == std::string::npos ? s.size() : s.find_first_not_of(' '));
  }
  return f;
}

}  // namespace

std::string CpuFeatures::widest_fma_isa() const {
  if (has_avx512()) return "avx512";
  if (has_avx2_fma()) return "avx2";
  return "sse";
}

std::string CpuFeatures::isa_list() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += s.empty() ? name : std::string(" ") + name;
  };
  add(has_avx512(), "avx512");
  add(has_avx512_bf16(), "avx512_bf16");
  add(has_amx_bf16(), "amx_bf16");
  add(avx2 && os_avx, "avx2");
  add(fma && os_avx, "fma");
  return s.empty() ? "sse" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string missing_compiled_isa(const CpuFeatures& f) {
  // MEGATRON_COMPILED_*: 1 when the rest of the build was compiled with that instruction set.
  struct Need {
    bool compiled, available;
    const char* name;
  };
  const Need needs[] = {
      {MEGATRON_COMPILED_AVX512F == 1, f.avx512f && f.os_avx512, "avx512f"},
      {MEGATRON_COMPILED_AVX512BW == 1, f.avx512bw && f.os_avx512, "avx512bw"},
      {MEGATRON_COMPILED_AVX2 == 1, f.avx2 && f.os_avx, "avx2"},
      {MEGATRON_COMPILED_FMA == 1, f.fma && f.os_avx, "fma"},
  };
  std::string missing;
  for (const Need& n : needs)
    if (n.compiled && !n.available)
      missing += missing.empty() ? n.name : std::string(", ") + n.name;
  return missing;
}

void check_compiled_isa() {
  const CpuFeatures& f = cpu_features();
  const std::string missing = missing_compiled_isa(f);
  MT_CHECK(missing.empty(), "this build's CPU kernels were compiled for instructions this CPU (",
           f.model_name, ") does not have: ", missing,
           ". Rebuild on this machine (tools/build.sh), or for a mixed cluster configure an "
           "older target, e.g. tools/build.sh -DMEGATRON_CPU_ARCH=x86-64-v3");
}

bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool granted = cpu_features().amx_tile &&
                              syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
#else
  return false;
#endif
}

}  // namespace megatron::kernels::cpu
