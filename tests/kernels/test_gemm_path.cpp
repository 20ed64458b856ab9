// The GEMM path in use matches this CPU: oneDNN must see the widest instruction set the CPU has
// (so a library falling back to older kernels fails here rather than running 5x slower in
// silence), bf16 must run natively where the CPU has bf16 instructions, and the peak loops must
// measure the instructions the CPU's feature bits promise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_peak.h"
#include "kernels/cpu/gemm.h"

namespace megatron::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// Our CPUID decoding agrees with the kernel's reading of the same bits.
TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  const cpu::CpuFeatures& f = cpu::cpu_features();
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512dq, flags.count("avx512dq") == 1);
  EXPECT_EQ(f.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.amx_tile, flags.count("amx_tile") == 1);
  EXPECT_EQ(f.amx_bf16, flags.count("amx_bf16") == 1);
  std::cout << "[cpu] " << f.model_name << " (family " << f.family << " model " << f.model
            << "): " << f.isa_list() << "\n";
}

// A build compiled for instructions a CPU lacks is refused at start, naming them (this test is
// compiled with the same -march as the kernels).
TEST(CpuFeatures, CompiledIsaCheckNamesWhatACpuLacks) {
  EXPECT_EQ(cpu::missing_compiled_isa(cpu::cpu_features()), "");  // built here, runs here
  EXPECT_NO_THROW(cpu::check_compiled_isa());
  const cpu::CpuFeatures bare;  // no AVX at all
  const std::string missing = cpu::missing_compiled_isa(bare);
#ifdef __AVX512F__
  EXPECT_THAT(missing, HasSubstr("avx512f"));
#endif
#ifdef __AVX2__
  EXPECT_THAT(missing, HasSubstr("avx2"));
#endif
#ifdef __FMA__
  EXPECT_THAT(missing, HasSubstr("fma"));
#endif
#if !defined(__AVX2__) && !defined(__AVX512F__) && !defined(__FMA__)
  EXPECT_EQ(missing, "");
#endif
}

// oneDNN's effective instruction set is at least the widest one the CPU offers.
TEST(GemmPath, OnednnUsesTheWidestIsaOfThisCpu) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const std::string isa = cpu::onednn_isa();
  std::cout << "[gemm] " << cpu::gemm_path() << "\n";
  if (f.has_amx_bf16()) {
    EXPECT_EQ(isa, "avx512_core_amx");
  } else if (f.has_avx512_bf16()) {
    EXPECT_EQ(isa, "avx512_core_bf16");
  } else if (f.has_avx512()) {
    EXPECT_THAT(isa, StartsWith("avx512_core"));
  } else if (f.has_avx2_fma()) {
    EXPECT_THAT(isa, StartsWith("avx2"));
  }
}

// The kernels oneDNN picks for real shapes are its optimised ones for that ISA, not a fallback.
TEST(GemmPath, Fp32KernelMatchesTheWidestFma) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const std::string impl = cpu::matmul_impl(DType::F32, 512, 768, 768);
  EXPECT_THAT(impl, ::testing::Not(StartsWith("ref"))) << impl;
  if (f.has_avx512()) {
    EXPECT_THAT(impl, HasSubstr("avx512_core")) << impl;
  } else if (f.has_avx2_fma()) {
    // oneDNN 2.6 names its AVX2 matmul "gemm:jit" (its JIT sgemm, dispatching on the ISA that
    // OnednnUsesTheWidestIsaOfThisCpu checks) or "brg:avx2".
    EXPECT_THAT(impl, ::testing::AnyOf(HasSubstr("avx2"), HasSubstr("jit"))) << impl;
  }
}

TEST(GemmPath, Bf16IsNativeWhereTheCpuHasBf16Instructions) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  EXPECT_EQ(cpu::native_bf16_gemm(), f.has_avx512_bf16() || f.has_amx_bf16());
  const std::string impl = cpu::matmul_impl(DType::BF16, 512, 768, 768);
  if (f.has_amx_bf16()) {
    EXPECT_THAT(impl, HasSubstr("amx")) << impl;
  } else if (f.has_avx512_bf16()) {
    EXPECT_THAT(impl, HasSubstr("avx512_core_bf16")) << impl;
  }
  const std::string path = cpu::gemm_path();
  EXPECT_THAT(path, StartsWith("oneDNN "));
  EXPECT_THAT(path, HasSubstr(cpu::native_bf16_gemm() ? "(native)" : "widened to fp32"));
}

TEST(CpuPeak, MeasuresTheWidestInstructions) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const cpu::PeakFlops fp32 = cpu::measure_fp32_peak();
  EXPECT_GT(fp32.flops, 1e9);  // any x86-64 core does > 1 GFLOP/s
  EXPECT_THAT(fp32.isa, StartsWith(f.widest_fma_isa()));
  const cpu::PeakFlops bf16 = cpu::measure_bf16_peak();
  EXPECT_GT(bf16.flops, 1e9);
  // AMX multiplies 16x16x32 tiles per instruction: it beats any vector FMA by a wide margin.
  if (f.has_amx_bf16()) {
    EXPECT_EQ(bf16.isa, "amx_bf16");
    EXPECT_GT(bf16.flops, 4 * fp32.flops);
  }
  std::cout << "[peak] fp32 " << fp32.flops / 1e9 << " GFLOP/s (" << fp32.isa << "), bf16 "
            << bf16.flops / 1e9 << " GFLOP/s (" << bf16.isa << ") on " << omp_get_max_threads()
            << " thread(s)\n";
}

}  // namespace
}  // namespace megatron::kernels
