#include "kernels/cpu/packed_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/common/numeric.h"
#include "kernels/cpu/cpu_features.h"
#include "megatron/core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MEGATRON_PACKED_GEMM_AVX2 1
#endif

namespace megatron::kernels::cpu {

#ifdef MEGATRON_PACKED_GEMM_AVX2
namespace {

// Register tile and cache blocks: a 6x16 tile is 12 of the 16 ymm registers; a KC x 16 panel of
// B (24 KiB) stays in L1, an MC x KC block of A (216 KiB) in L2, the KC x NC block of B (4.5 MiB)
// in L3. KC 384 measured best on a Zen 3 (2 threads, the GPT-2 shapes of
// bench_gemm_candidates: 128-134 GFLOP/s against 116-127 at BLIS's 256; 512 and other MC worse).
constexpr int64_t kMR = 6, kNR = 16, kKC = 384, kMC = 144, kNC = 3072;

inline float widen(float x) { return x; }
inline float widen(bf16_t x) { return math::bf16_bits_to_float(x.bits); }

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;

// A per-thread scratch of at least n floats, 64-byte aligned, kept between calls (a fresh
// multi-MiB allocation per GEMM would page-fault through new memory every time).
float* scratch(Buffer& buf, int64_t& capacity, int64_t n) {
  if (n > capacity) {
    const size_t bytes = static_cast<size_t>((n * 4 + 63) / 64 * 64);
    buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    MT_CHECK(buf != nullptr, "packed_gemm: out of memory for a ", bytes, "-byte panel");
    capacity = n;
  }
  return buf.get();
}
thread_local Buffer tl_a, tl_b;
thread_local int64_t tl_a_cap = 0, tl_b_cap = 0;

// op(A) rows [i0, i0 + mr) x columns [k0, k0 + kc) -> ap[k][kMR], rows past mr zero.
template <typename T>
void pack_a(bool trans, const T* A, int64_t lda, int64_t i0, int64_t mr, int64_t k0, int64_t kc,
            float* ap) {
  if (mr < kMR) std::memset(ap, 0, sizeof(float) * static_cast<size_t>(kc * kMR));
  if (trans) {  // stored [K, M]
    for (int64_t k = 0; k < kc; ++k) {
      const T* col = A + (k0 + k) * lda + i0;
      for (int64_t r = 0; r < mr; ++r) ap[k * kMR + r] = widen(col[r]);
    }
  } else {
    for (int64_t r = 0; r < mr; ++r) {
      const T* row = A + (i0 + r) * lda + k0;
      for (int64_t k = 0; k < kc; ++k) ap[k * kMR + r] = widen(row[k]);
    }
  }
}

// op(B) rows [k0, k0 + kc) x columns [j0, j0 + nr) -> bp[k][kNR], columns past nr zero.
template <typename T>
void pack_b(bool trans, const T* B, int64_t ldb, int64_t j0, int64_t nr, int64_t k0, int64_t kc,
            float* bp) {
  if (nr < kNR) std::memset(bp, 0, sizeof(float) * static_cast<size_t>(kc * kNR));
  if (trans) {  // stored [N, K]
    for (int64_t c = 0; c < nr; ++c) {
      const T* row = B + (j0 + c) * ldb + k0;
      for (int64_t k = 0; k < kc; ++k) bp[k * kNR + c] = widen(row[k]);
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const T* row = B + (k0 + k) * ldb + j0;
      for (int64_t c = 0; c < nr; ++c) bp[k * kNR + c] = widen(row[c]);
    }
  }
}

// How a tile lands in C: C = alpha * acc + beta * C (+ bias) for the first K block, C += alpha *
// acc for the others. beta == 0 never reads C.
struct Store {
  float alpha, beta;
  const float* bias;  // at the tile's first column, or null
};

// The 6x16 tile of ap (kc x 6) times bp (kc x 16) into C (full tile).
void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                  const Store& st) {
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    // The tile of C is read and written once the products are summed: fetch it meanwhile.
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNR - 1), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
    ap += kMR;
    bp += kNR;
  }
  const __m256 alpha = _mm256_set1_ps(st.alpha), beta = _mm256_set1_ps(st.beta);
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256 v = _mm256_mul_ps(alpha, acc[r][h]);
      if (st.beta != 0.0f) v = _mm256_fmadd_ps(beta, _mm256_loadu_ps(row + 8 * h), v);
      if (st.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(st.bias + 8 * h));
      _mm256_storeu_ps(row + 8 * h, v);
    }
  }
}

// A partial tile (mr < 6 or nr < 16): through a full tile of scratch.
void edge_kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t mr,
                 int64_t nr, const Store& st) {
  alignas(32) float tile[kMR * kNR];
  micro_kernel(kc, ap, bp, tile, kNR, Store{1.0f, 0.0f, nullptr});
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) {
      float v = st.alpha * tile[r * kNR + j];
      if (st.beta != 0.0f) v += st.beta * c[r * ldc + j];
      if (st.bias) v += st.bias[j];
      c[r * ldc + j] = v;
    }
}

template <typename T>
void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda,
         const T* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta * C (+ bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta != 0.0f ? beta * C[i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  float* bpack = scratch(tl_b, tl_b_cap, kKC * kNC);  // the calling thread's, shared by the team
  // Threads split the rows (or, for few rows, the columns) of each block of C.
  const bool split_rows = M >= N || M >= threads * kMC;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    float* apack = scratch(tl_a, tl_a_cap, kMC * kKC);
    const int64_t rows_per = split_rows ? (M + nt * kMR - 1) / (nt * kMR) * kMR : M;
    const int64_t m0 = split_rows ? std::min(M, t * rows_per) : 0;
    const int64_t m1 = split_rows ? std::min(M, m0 + rows_per) : M;
    for (int64_t jc = 0; jc < N; jc += kNC) {
      const int64_t nc = std::min(kNC, N - jc);
      const int64_t panels = (nc + kNR - 1) / kNR;
      const int64_t panels_per = split_rows ? panels : (panels + nt - 1) / nt;
      const int64_t p0 = split_rows ? 0 : std::min(panels, t * panels_per);
      const int64_t p1 = split_rows ? panels : std::min(panels, p0 + panels_per);
      for (int64_t pc = 0; pc < K; pc += kKC) {
        const int64_t kc = std::min(kKC, K - pc);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < panels; ++p)
          pack_b(tb, B, ldb, jc + p * kNR, std::min(kNR, nc - p * kNR), pc, kc,
                 bpack + p * kNR * kc);
        // (the loop's barrier: every panel is packed before any thread reads one)
        const bool first = pc == 0;
        for (int64_t ic = m0; ic < m1; ic += kMC) {
          const int64_t mc = std::min(kMC, m1 - ic);
          for (int64_t ir = 0; ir < mc; ir += kMR)
            pack_a(ta, A, lda, ic + ir, std::min(kMR, mc - ir), pc, kc, apack + ir * kc);
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t j = jc + p * kNR, nr = std::min(kNR, nc - p * kNR);
            const Store st{alpha, first ? beta : 1.0f, first && bias ? bias + j : nullptr};
            for (int64_t ir = 0; ir < mc; ir += kMR) {
              const int64_t mr = std::min(kMR, mc - ir);
              float* c = C + (ic + ir) * ldc + j;
              if (mr == kMR && nr == kNR)
                micro_kernel(kc, apack + ir * kc, bpack + p * kNR * kc, c, ldc, st);
              else
                edge_kernel(kc, apack + ir * kc, bpack + p * kNR * kc, c, ldc, mr, nr, st);
            }
          }
        }
#pragma omp barrier
      }
    }
  }
}

}  // namespace

bool packed_gemm_available() { return cpu_features().has_avx2_fma(); }

template <typename T>
void packed_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const T* A, int64_t lda, const T* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, const float* bias) {
  MT_CHECK(packed_gemm_available(), "packed_gemm: this CPU has no AVX2 + FMA");
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

#else  // not compiled for AVX2 + FMA

bool packed_gemm_available() { return false; }

template <typename T>
void packed_gemm(bool, bool, int64_t, int64_t, int64_t, float, const T*, int64_t, const T*, int64_t,
                 float, float*, int64_t, const float*) {
  MT_CHECK(false, "packed_gemm: this build was not compiled for AVX2 + FMA");
}

#endif

template void packed_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t,
                                 const float*);
template void packed_gemm<bf16_t>(bool, bool, int64_t, int64_t, int64_t, float, const bf16_t*,
                                  int64_t, const bf16_t*, int64_t, float, float*, int64_t,
                                  const float*);

}  // namespace megatron::kernels::cpu
