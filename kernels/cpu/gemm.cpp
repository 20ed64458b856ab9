#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_features.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

using dnnl::memory;

// The CPU engine and the bf16 matmul primitives, one per shape/stride/epilogue (a training step
// uses a few dozen). oneDNN compiles a kernel per primitive; building it costs ~0.1 ms, so each
// is built once. Lives for the process like oneDNN's own kernel cache.
class Onednn {
 public:
  static Onednn& get() {
    static Onednn instance;
    return instance;
  }
  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  using Key =
      std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int>;
  struct Matmul {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  Matmul& bf16_matmul(const Bf16Gemm& g) {
    const Key key{g.trans_a,
                  g.trans_b,
                  g.M,
                  g.N,
                  g.K,
                  g.lda,
                  g.ldb,
                  g.ldc,
                  g.accumulate,
                  static_cast<int>(g.c_dtype),
                  g.bias ? static_cast<int>(g.bias_dtype) : -1};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (cache_.size() >= kMaxCached) cache_.clear();  // shapes churn only in odd workloads
    dnnl::matmul::primitive_desc pd = descriptor(g);
    dnnl::matmul primitive(pd);
    return cache_.emplace(key, Matmul{std::move(pd), std::move(primitive)}).first->second;
  }

  dnnl::matmul::primitive_desc descriptor(const Bf16Gemm& g) const {
    const memory::desc a({g.M, g.K}, memory::data_type::bf16,
                         g.trans_a ? memory::dims{1, g.lda} : memory::dims{g.lda, 1});
    const memory::desc b({g.K, g.N}, memory::data_type::bf16,
                         g.trans_b ? memory::dims{1, g.ldb} : memory::dims{g.ldb, 1});
    const memory::desc c({g.M, g.N}, data_type(g.c_dtype), memory::dims{g.ldc, 1});
    dnnl::primitive_attr attr;
    if (g.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    if (g.bias) {
      return {dnnl::matmul::desc(a, b, bias_desc(g), c), attr, engine_};
    }
    return {dnnl::matmul::desc(a, b, c), attr, engine_};
  }

  static memory::desc bias_desc(const Bf16Gemm& g) {
    return memory::desc({1, g.N}, data_type(g.bias_dtype), memory::dims{g.N, 1});
  }

  static memory::data_type data_type(DType t) {
    MT_CHECK(t == DType::F32 || t == DType::BF16,
             "gemm_bf16: C and bias must be fp32 or bf16, got ", dtype_name(t));
    return t == DType::F32 ? memory::data_type::f32 : memory::data_type::bf16;
  }

 private:
  Onednn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    // oneDNN asks for AMX itself; asking first keeps the answer in one place (cpu_features).
    request_amx_permission();
  }
  static constexpr size_t kMaxCached = 512;
  dnnl::engine engine_;
  dnnl::stream stream_;  // CPU execution is synchronous: one stream serves every call
  std::mutex mutex_;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = 0;
      std::apply(
          [&](const auto&... v) { ((h = h * 1000003u ^ std::hash<int64_t>()(int64_t(v))), ...); },
          k);
      return h;
    }
  };
  std::unordered_map<Key, Matmul, KeyHash> cache_;
};

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "none";
  }
}

bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

}  // namespace

namespace {

// A dimension this long (the LM head's vocabulary: N in forward, M in the weight gradient, K in
// the input gradient) costs oneDNN's kernels 10-45% of their speed (most in bf16); in chunks of a
// few thousand they run at the speed of the layers' GEMMs (bench/bench_gemm_candidates.cpp).
constexpr int64_t kLongDim = 16384;

// fn(begin, size) for each of the near-equal chunks, of about `target`, of a dimension of length n.
template <typename Fn>
void for_each_chunk(int64_t n, int64_t target, Fn&& fn) {
  const int64_t chunks = (n + target - 1) / target;
  const int64_t size = (n + chunks - 1) / chunks;
  for (int64_t begin = 0; begin < n; begin += size) fn(begin, std::min(size, n - begin));
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  MT_CHECK(st == dnnl_success, "gemm: oneDNN sgemm failed (status ", int(st), ") for M=", M,
           " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

// fp32: long N (forward) and long M (weight gradient) in chunks; the input gradient's long K
// runs well as one call.
void sgemm_chunked(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (N > kLongDim) {
    for_each_chunk(N, 8192, [&](int64_t n0, int64_t n) {
      sgemm(ta, tb, M, n, K, alpha, A, lda, tb ? B + n0 * ldb : B + n0, ldb, beta, C + n0, ldc);
    });
  } else if (M > kLongDim) {
    for_each_chunk(M, 8192, [&](int64_t m0, int64_t m) {
      sgemm(ta, tb, m, N, K, alpha, ta ? A + m0 : A + m0 * lda, lda, B, ldb, beta, C + m0 * ldc,
            ldc);
    });
  } else {
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  if (M == 0 || N == 0) return;
  if (bias) {
    // Seed C with beta*C + bias so one GEMM call finishes the job with beta = 1.
#pragma omp parallel for schedule(static) if (M * N > 16384)
    for (int64_t i = 0; i < M; ++i) {
      float* row = C + i * ldc;
      if (beta == 0.0f) {
        for (int64_t j = 0; j < N; ++j) row[j] = bias[j];
      } else {
        for (int64_t j = 0; j < N; ++j) row[j] = beta * row[j] + bias[j];
      }
    }
    beta = 1.0f;
  }
  if (K == 0) {
    if (!bias) {
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  sgemm_chunked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

void run_bf16_matmul(const Bf16Gemm& g) {
  Onednn& dnn = Onednn::get();
  try {
    Onednn::Matmul& mm = dnn.bf16_matmul(g);
    const dnnl::matmul::primitive_desc& pd = mm.pd;
    memory a(pd.src_desc(), dnn.engine(), const_cast<bf16_t*>(g.A));
    memory b(pd.weights_desc(), dnn.engine(), const_cast<bf16_t*>(g.B));
    memory c(pd.dst_desc(), dnn.engine(), g.C);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (g.bias)
      args.emplace(DNNL_ARG_BIAS,
                   memory(Onednn::bias_desc(g), dnn.engine(), const_cast<void*>(g.bias)));
    mm.primitive.execute(dnn.stream(), args);
    dnn.stream().wait();
  } catch (const dnnl::error& e) {
    MT_CHECK(false, "gemm_bf16: oneDNN matmul failed (", e.what(), ") for M=", g.M, " N=", g.N,
             " K=", g.K, " trans_a=", g.trans_a, " trans_b=", g.trans_b);
  }
}

size_t bytes_of(DType t) { return t == DType::BF16 ? 2 : 4; }

}  // namespace

void gemm_bf16(const Bf16Gemm& g) {
  if (g.M == 0 || g.N == 0) return;
  MT_CHECK(native_bf16_gemm(),
           "gemm_bf16: this CPU has no bf16 GEMM kernel (no AVX-512 BF16 or AMX); bf16 linear "
           "layers widen to fp32 GEMMs there instead");
  MT_CHECK(g.K > 0, "gemm_bf16: K must be positive (got ", g.K, ")");
  const size_t c_bytes = bytes_of(g.c_dtype);
  if (g.N > kLongDim) {  // columns of B, C and bias
    for_each_chunk(g.N, 4096, [&](int64_t n0, int64_t n) {
      Bf16Gemm part = g;
      part.N = n;
      part.B = g.trans_b ? g.B + n0 * g.ldb : g.B + n0;
      part.C = static_cast<char*>(g.C) + n0 * c_bytes;
      if (g.bias) part.bias = static_cast<const char*>(g.bias) + n0 * bytes_of(g.bias_dtype);
      gemm_bf16(part);
    });
    return;
  }
  if (g.M > kLongDim) {  // rows of A and C
    for_each_chunk(g.M, 8192, [&](int64_t m0, int64_t m) {
      Bf16Gemm part = g;
      part.M = m;
      part.A = g.trans_a ? g.A + m0 : g.A + m0 * g.lda;
      part.C = static_cast<char*>(g.C) + m0 * g.ldc * int64_t(c_bytes);
      gemm_bf16(part);
    });
    return;
  }
  if (g.K > kLongDim) {
    // The chunks' products accumulate in fp32 (in C itself when it is fp32, else in a scratch
    // matrix rounded into C once at the end), so the result is rounded once as without chunks.
    std::vector<float> scratch;
    float* acc = static_cast<float*>(g.C);
    int64_t ld = g.ldc;
    if (g.c_dtype == DType::BF16) {
      scratch.assign(static_cast<size_t>(g.M * g.N), 0.0f);
      acc = scratch.data(), ld = g.N;
      const bf16_t* c16 = static_cast<const bf16_t*>(g.C);
      if (g.accumulate)
        for (int64_t i = 0; i < g.M; ++i) bf16_to_f32(c16 + i * g.ldc, acc + i * ld, g.N);
    }
    for_each_chunk(g.K, 8192, [&](int64_t k0, int64_t k) {
      Bf16Gemm part = g;
      part.K = k;
      part.A = g.trans_a ? g.A + k0 * g.lda : g.A + k0;
      part.B = g.trans_b ? g.B + k0 : g.B + k0 * g.ldb;
      part.C = acc, part.c_dtype = DType::F32, part.ldc = ld;
      part.accumulate = g.accumulate || k0 > 0;
      if (k0 > 0) part.bias = nullptr;
      run_bf16_matmul(part);
    });
    if (g.c_dtype == DType::BF16) {
      bf16_t* c16 = static_cast<bf16_t*>(g.C);
      for (int64_t i = 0; i < g.M; ++i) f32_to_bf16(acc + i * ld, c16 + i * g.ldc, g.N);
    }
    return;
  }
  run_bf16_matmul(g);
}

std::string matmul_impl(DType dtype, int64_t M, int64_t N, int64_t K) {
  MT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "matmul_impl: fp32 or bf16, got ",
           dtype_name(dtype));
  const auto dt = dtype == DType::F32 ? memory::data_type::f32 : memory::data_type::bf16;
  const memory::desc a({M, K}, dt, memory::dims{K, 1}), b({K, N}, dt, memory::dims{N, 1}),
      c({M, N}, memory::data_type::f32, memory::dims{N, 1});
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), Onednn::get().engine());
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "unimplemented";  // e.g. bf16 where oneDNN is limited to an ISA without bf16 kernels
  }
}

int64_t widened_gemm_block_rows(int64_t rows, int64_t in, int64_t out) {
  constexpr int64_t kBlockBytes = 4 << 20, kMinRows = 1024;
  const int64_t fit = kBlockBytes / (4 * std::max<int64_t>(in + out, 1)) / 16 * 16;
  return std::min(std::max(kMinRows, fit), std::max<int64_t>(rows, 1));
}

bool native_bf16_gemm() {
  static const bool native = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.has_avx512_bf16() && !f.has_amx_bf16()) return false;
    const std::string impl = matmul_impl(DType::BF16, 256, 256, 256);
    return impl != "unimplemented" && !is_reference(impl);
  }();
  return native;
}

std::string onednn_isa() {
  Onednn::get();  // AMX permission first: oneDNN counts AMX only once the OS allows it
  return isa_name(dnnl_get_effective_cpu_isa());
}

std::string gemm_path() {
  const dnnl_version_t* v = dnnl_version();
  std::string s = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch) + ", cpu isa " + onednn_isa() + ": fp32 " +
                  matmul_impl(DType::F32, 256, 256, 256) + ", bf16 ";
  s += native_bf16_gemm() ? matmul_impl(DType::BF16, 256, 256, 256) + " (native)"
                          : std::string("widened to fp32 (no bf16 instructions)");
  return s;
}

namespace {
template <typename T>
void bias_grad_impl(const T* dout, int64_t M, int64_t N, float* dbias) {
  // Column sums; each thread owns a block of columns so the result is deterministic.
#pragma omp parallel for schedule(static) if (M * N > 16384)
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t j1 = j0 + 64 < N ? j0 + 64 : N;
    float acc[64] = {};
    for (int64_t i = 0; i < M; ++i) {
      const T* row = dout + i * N;
      for (int64_t j = j0; j < j1; ++j) {
        if constexpr (std::is_same_v<T, float>)
          acc[j - j0] += row[j];
        else
          acc[j - j0] += math::bf16_bits_to_float(row[j].bits);
      }
    }
    for (int64_t j = j0; j < j1; ++j) dbias[j] += acc[j - j0];
  }
}
}  // namespace

void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias) {
  bias_grad_impl(dout, M, N, dbias);
}
void bias_grad(const bf16_t* dout, int64_t M, int64_t N, float* dbias) {
  bias_grad_impl(dout, M, N, dbias);
}

}  // namespace megatron::kernels::cpu
