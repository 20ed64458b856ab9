// The GEMM libraries we could use on this CPU, side by side on the training step's shapes
// (GPT-2 124M, seq 256, micro-batch 8: QKV, attention-out, FC1, FC2 forward/dgrad/wgrad and the
// LM head), with the FMA peak of the same threads beside them. One candidate per process, because
// OpenBLAS reads its core type once when it loads:
//   bench_gemm_candidates --candidate onednn|onednn-bf16|openblas|openblas-forced|blis|packed|
//                                     packed-bf16|microkernel
//   bench/run_gemm_candidates.sh runs them all.
// microkernel is no GEMM: every thread runs a 6-row register-tile kernel (12 accumulators, the
// widest vectors the CPU has) over panels that stay in its L1/L2, the inner loop of every
// BLIS-style GEMM without packing, edges or C traffic. Its share of the FMA peak is the ceiling a
// GEMM's inner loop can reach on this machine, and so what an MFU goal can ask of it.
// openblas: the core OpenBLAS picks for itself (openblas_get_corename); openblas-forced: the
// core chosen from this CPU's feature bits (AVX-512 BF16 -> Cooperlake, AVX-512 -> SkylakeX,
// AVX2 -> Haswell) through OPENBLAS_CORETYPE, set before the library loads. OpenBLAS and BLIS
// are loaded with dlopen, so the project never links them.
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_peak.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_gemm.h"

namespace {

using namespace megatron;

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
};

// CBLAS's row-major sgemm, as OpenBLAS and BLIS export it.
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename Fn>
double gflops(const Shape& s, Fn&& fn) {
  fn();  // warm-up (oneDNN builds its kernel here)
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 0.4) {
    fn();
    ++reps;
  }
  return 2.0 * double(s.M) * double(s.N) * double(s.K) * reps / seconds_since(t0) / 1e9;
}

// One 6-row tile step over k: two B vectors, six broadcasts of A, twelve FMAs into named
// accumulators (an array of vectors can end up in memory).
#define MT_TILE_ROW(V, bcast, fma, i)  \
  {                                    \
    const V a = bcast(ap + 6 * k + i); \
    c##i##0 = fma(a, b0, c##i##0);     \
    c##i##1 = fma(a, b1, c##i##1);     \
  }
#define MT_TILE_KERNEL(name, isa, V, W, zero, load, bcast, fma, add, store)                      \
  __attribute__((target(isa), noinline)) void name(int64_t kc, const float* ap, const float* bp, \
                                                   float* c) {                                   \
    V c00 = zero(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00, \
      c40 = c00, c41 = c00, c50 = c00, c51 = c00;                                                \
    for (int64_t k = 0; k < kc; ++k) {                                                           \
      const V b0 = load(bp + 2 * W * k), b1 = load(bp + 2 * W * k + W);                          \
      MT_TILE_ROW(V, bcast, fma, 0)                                                              \
      MT_TILE_ROW(V, bcast, fma, 1)                                                              \
      MT_TILE_ROW(V, bcast, fma, 2)                                                              \
      MT_TILE_ROW(V, bcast, fma, 3)                                                              \
      MT_TILE_ROW(V, bcast, fma, 4)                                                              \
      MT_TILE_ROW(V, bcast, fma, 5)                                                              \
    }                                                                                            \
    const V r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};                \
    for (int i = 0; i < 12; ++i) store(c + W * i, add(load(c + W * i), r[i]));                   \
  }
__attribute__((target("avx512f"))) inline __m512 broadcast512(const float* p) {
  return _mm512_set1_ps(*p);
}
MT_TILE_KERNEL(tile_avx2, "avx2,fma", __m256, 8, _mm256_setzero_ps, _mm256_load_ps,
               _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_add_ps, _mm256_store_ps)
MT_TILE_KERNEL(tile_avx512, "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_load_ps, broadcast512,
               _mm512_fmadd_ps, _mm512_add_ps, _mm512_store_ps)

// The microkernel candidate: GFLOP/s of every thread running its tile over its own panels at
// once, in rounds of ~25 ms. Best and median round: the best is measured as the FMA peak is
// (cpu_peak.cpp), the median shows what a shared host leaves of it most of the time.
struct RoundRates {
  double best = 0, median = 0;
};
RoundRates microkernel_gflops(bool avx512) {
  const int64_t kc = 256, panels = 16, width = avx512 ? 32 : 16;  // 256-512 KiB of B panels
  const int threads = omp_get_max_threads();
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<float[], Free>;
  auto filled = [](int64_t n, float v) {  // 64-byte aligned, as the tile's loads need
    Buffer b(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(float))));
    std::fill(b.get(), b.get() + n, v);
    return b;
  };
  struct Panels {
    Buffer a, b, c;
  };
  std::vector<Panels> per(static_cast<size_t>(threads));
  for (Panels& p : per)
    p = {filled(6 * kc, 1e-3f), filled(panels * kc * width, 1e-3f), filled(panels * 6 * width, 0)};
  auto sweep = [&](Panels& p) {
    for (int64_t i = 0; i < panels; ++i) {
      const float* bp = p.b.get() + i * kc * width;
      float* c = p.c.get() + i * 6 * width;
      if (avx512)
        tile_avx512(kc, p.a.get(), bp, c);
      else
        tile_avx2(kc, p.a.get(), bp, c);
    }
  };
  const double flops_per_sweep = 2.0 * 6 * double(width) * double(kc) * double(panels);
  int64_t sweeps = 16;
  for (;;) {  // calibrate one thread to ~25 ms
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < sweeps; ++i) sweep(per[0]);
    if (seconds_since(t0) > 0.025) break;
    sweeps *= 2;
  }
  std::vector<double> rates;
  for (int round = 0; round < 20; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    for (int64_t i = 0; i < sweeps; ++i) sweep(per[static_cast<size_t>(omp_get_thread_num())]);
    rates.push_back(flops_per_sweep * double(sweeps) * threads / seconds_since(t0) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return {rates.back(), rates[rates.size() / 2]};
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_gemm_candidates --candidate "
               "onednn|onednn-bf16|openblas|openblas-forced|blis|packed|packed-bf16|microkernel\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--candidate") != 0) return usage();
  const std::string cand = argv[2];
  const auto& f = kernels::cpu::cpu_features();
  std::string label = cand;
  CblasSgemm sgemm = nullptr;
  if (cand == "microkernel") {
    if (!f.has_avx2_fma()) {
      std::printf("%-16s needs AVX2 + FMA\n", cand.c_str());
      return 0;
    }
    const RoundRates g = microkernel_gflops(f.has_avx512());
    const auto peak = kernels::cpu::measure_fp32_peak();
    const double p = peak.flops / 1e9;
    std::printf("%s (6x%d register tile, %s, cache-resident panels), %d threads\n", cand.c_str(),
                f.has_avx512() ? 32 : 16, f.has_avx512() ? "avx512" : "avx2",
                omp_get_max_threads());
    std::printf(
        "RESULT %-16s inner loop best %.1f GFLOP/s = %.1f%%, median %.1f = %.1f%% of the "
        "%s peak %.1f GFLOP/s\n",
        cand.c_str(), g.best, 100 * g.best / p, g.median, 100 * g.median / p, peak.isa.c_str(), p);
    return 0;
  }
  if (cand == "openblas" || cand == "openblas-forced") {
    if (cand == "openblas-forced") {
      const char* core = f.has_avx512_bf16() ? "Cooperlake"
                         : f.has_avx512()    ? "SkylakeX"
                         : f.has_avx2_fma()  ? "Haswell"
                                             : "Prescott";
      setenv("OPENBLAS_CORETYPE", core, 1);
    }
    void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::printf("%-16s not installed (%s)\n", cand.c_str(), dlerror());
      return 0;
    }
    sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    auto corename = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"));
    if (corename) label += std::string(" (core ") + corename() + ")";
  } else if (cand == "blis") {
    void* lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::printf("%-16s not installed (%s)\n", cand.c_str(), dlerror());
      return 0;
    }
    sgemm = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    auto arch_id = reinterpret_cast<int (*)()>(dlsym(lib, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(lib, "bli_arch_string"));
    if (arch_id && arch_name) label += std::string(" (arch ") + arch_name(arch_id()) + ")";
  } else if (cand == "onednn" || cand == "onednn-bf16") {
    if (cand == "onednn-bf16" && !kernels::cpu::native_bf16_gemm()) {
      std::printf("%-16s no bf16 kernel on this CPU (no AVX-512 BF16 or AMX)\n", cand.c_str());
      return 0;
    }
    label += " (" + kernels::cpu::gemm_path() + ")";
  } else if (cand == "packed" || cand == "packed-bf16") {
    if (!kernels::cpu::packed_gemm_available()) {
      std::printf("%-16s needs AVX2 + FMA\n", cand.c_str());
      return 0;
    }
    label += " (our AVX2 6x16 kernel" +
             std::string(cand == "packed-bf16" ? ", bf16 widened while packing)" : ")");
  } else {
    return usage();
  }
  const bool own = cand == "packed" || cand == "packed-bf16";
  if (cand != "onednn" && cand != "onednn-bf16" && !own && !sgemm) {
    std::printf("%-16s has no cblas_sgemm\n", cand.c_str());
    return 0;
  }

  const int64_t T = 8 * 256, D = 768, F = 3072, V = 50304;
  const Shape shapes[] = {
      {"qkv fwd", false, true, T, 3 * D, D},    {"fc1 fwd", false, true, T, F, D},
      {"fc2 fwd", false, true, T, D, F},        {"fc2 dgrad", false, false, T, F, D},
      {"fc1 wgrad", true, false, F, D, T},      {"proj fwd", false, true, T, D, D},
      {"lm head fwd", false, true, T, V, D},    {"lm head wgrad", true, false, V, D, T},
      {"lm head dgrad", false, false, T, D, V},
  };
  std::printf("%s, %d threads\n", label.c_str(), omp_get_max_threads());
  double flops = 0, secs = 0;
  for (const Shape& s : shapes) {
    const int64_t a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
    const int64_t b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
    double g = 0;
    if (cand == "packed-bf16") {
      // As a bf16 layer without bf16 instructions would run it: bf16 operands, fp32 output.
      std::vector<bf16_t> A(a_rows * a_cols, bf16_t{0x3c00}), B(b_rows * b_cols, bf16_t{0x3c00});
      std::vector<float> C(s.M * s.N);
      g = gflops(s, [&] {
        kernels::cpu::packed_gemm<bf16_t>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols,
                                          B.data(), b_cols, 0.0f, C.data(), s.N);
      });
    } else if (cand == "onednn-bf16") {
      std::vector<bf16_t> A(a_rows * a_cols, bf16_t{0x3c00}), B(b_rows * b_cols, bf16_t{0x3c00});
      // As in training: activations (forward, input gradient) in bf16, weight gradients
      // accumulated into the fp32 main gradients.
      const bool wgrad = s.ta;
      std::vector<float> C(s.M * s.N);
      std::vector<bf16_t> C16(s.M * s.N);
      kernels::cpu::Bf16Gemm gm;
      gm.trans_a = s.ta, gm.trans_b = s.tb, gm.M = s.M, gm.N = s.N, gm.K = s.K;
      gm.A = A.data(), gm.lda = a_cols, gm.B = B.data(), gm.ldb = b_cols;
      gm.C = wgrad ? static_cast<void*>(C.data()) : C16.data(), gm.ldc = s.N;
      gm.c_dtype = wgrad ? DType::F32 : DType::BF16, gm.accumulate = wgrad;
      g = gflops(s, [&] { kernels::cpu::gemm_bf16(gm); });
    } else {
      std::vector<float> A(a_rows * a_cols, 0.01f), B(b_rows * b_cols, 0.02f), C(s.M * s.N);
      if (cand == "packed") {
        g = gflops(s, [&] {
          kernels::cpu::packed_gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols,
                                           B.data(), b_cols, 0.0f, C.data(), s.N);
        });
      } else if (cand == "onednn") {
        g = gflops(s, [&] {
          kernels::cpu::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols, B.data(), b_cols,
                             0.0f, C.data(), s.N);
        });
      } else {
        g = gflops(s, [&] {
          sgemm(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.M), int(s.N),
                int(s.K), 1.0f, A.data(), int(a_cols), B.data(), int(b_cols), 0.0f, C.data(),
                int(s.N));
        });
      }
    }
    const double f2 = 2.0 * double(s.M) * double(s.N) * double(s.K);
    flops += f2;
    secs += f2 / (g * 1e9);
    std::printf("  %-14s M %5lld N %5lld K %5lld  %8.1f GFLOP/s\n", s.name,
                static_cast<long long>(s.M), static_cast<long long>(s.N),
                static_cast<long long>(s.K), g);
  }
  const auto peak =
      cand == "onednn-bf16" ? kernels::cpu::measure_bf16_peak() : kernels::cpu::measure_fp32_peak();
  const double all = flops / secs / 1e9;
  std::printf("RESULT %-16s all shapes %8.1f GFLOP/s = %5.1f%% of the %s peak %.1f GFLOP/s\n",
              cand.c_str(), all, 100 * all / (peak.flops / 1e9), peak.isa.c_str(),
              peak.flops / 1e9);
  return 0;
}
