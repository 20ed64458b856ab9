#include <cublasLt.h>
#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"
#include "megatron/backend/cuda/allocator.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

cudaDataType_t cuda_type(DType t, const char* what) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      break;
  }
  MT_CHECK(false, "gemm (CUDA): ", what, " dtype ", dtype_name(t),
           " not supported (F32, BF16, F16)");
  return CUDA_R_32F;
}

const char* epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None:
      return "none";
    case GemmEpilogue::Bias:
      return "bias";
    case GemmEpilogue::Gelu:
      return "gelu";
    case GemmEpilogue::BiasGelu:
      return "bias+gelu";
    case GemmEpilogue::GeluAux:
      return "gelu+aux";
    case GemmEpilogue::BiasGeluAux:
      return "bias+gelu+aux";
    case GemmEpilogue::DGelu:
      return "dgelu";
    case GemmEpilogue::DGeluBgrad:
      return "dgelu+bgrad";
    case GemmEpilogue::BgradA:
      return "bgrad(A)";
  }
  return "?";
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::Gelu:
      return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::BiasGelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::GeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::BiasGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::DGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::DGeluBgrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    // Row-major op(A) is cuBLAS's B operand (see gemm.h): its bias gradient is BGRADB.
    case GemmEpilogue::BgradA:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::BiasGelu || e == GemmEpilogue::BiasGeluAux ||
         e == GemmEpilogue::DGeluBgrad || e == GemmEpilogue::BgradA;
}
bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::GeluAux || e == GemmEpilogue::BiasGeluAux || e == GemmEpilogue::DGelu ||
         e == GemmEpilogue::DGeluBgrad;
}

// Largest power of two (<= 256) dividing the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

// RAII holders for the cuBLASLt descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

void make_layout(Layout& out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t stride) {
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.l, type, static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                     &count, sizeof(count)));
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

// C = beta * C + bias (K == 0: the product is empty), for each batch entry.
template <typename TC>
__global__ void empty_product_kernel(TC* C, int64_t M, int64_t N, int64_t ldc, int64_t stride_c,
                                     int64_t batch, float beta, const TC* bias) {
  const int64_t total = batch * M * N;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % N, i = (idx / N) % M, b = idx / (M * N);
    TC* c = C + b * stride_c + i * ldc + j;
    float v = beta == 0.0f ? 0.0f : beta * to_float(*c);
    if (bias) v += to_float(bias[j]);
    *c = from_float<TC>(v);
  }
}

// C[i, j] += bias[j] for each batch entry (the Bias epilogue on the cuBLAS fallback path).
template <typename TC>
__global__ void add_bias_kernel(TC* C, int64_t M, int64_t N, int64_t ldc, int64_t stride_c,
                                int64_t batch, const TC* bias) {
  const int64_t total = batch * M * N;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % N, i = (idx / N) % M, b = idx / (M * N);
    TC* c = C + b * stride_c + i * ldc + j;
    *c = from_float<TC>(to_float(*c) + to_float(bias[j]));
  }
}

constexpr int kChunkRows = 256;
constexpr int kTileCols = 32;
constexpr int kRowLanes = 8;

template <typename T>
__global__ void bias_grad_partial_kernel(const T* __restrict__ dout, int64_t M, int64_t N,
                                         float* __restrict__ partial) {
  __shared__ float s[kRowLanes][kTileCols];
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  const int64_t col = blockIdx.x * int64_t(kTileCols) + tx;
  const int64_t r0 = int64_t(blockIdx.y) * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < M ? r0 + kChunkRows : M;
  float acc = 0.0f;
  if (col < N)
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) acc += to_float(dout[r * N + col]);
  s[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && col < N) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += s[k][tx];
    partial[int64_t(blockIdx.y) * N + col] = sum;
  }
}

__global__ void bias_grad_final_kernel(const float* __restrict__ partial, int64_t chunks, int64_t N,
                                       float* __restrict__ dbias) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= N) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * N + col];
  dbias[col] += sum;
}

}  // namespace

struct GemmContext::Impl {
  megatron::cuda::CachingAllocator& allocator;
  size_t workspace_bytes;
  cublasLtHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<cudaStream_t, megatron::cuda::DeviceMemory> workspaces;
  struct Choice {
    bool fallback;  // no cuBLASLt algorithm: classic cuBLAS (epilogue None/Bias only)
    cublasLtMatmulAlgo_t algo;
  };
  std::map<std::vector<int64_t>, Choice> algos;
  cublasHandle_t classic = nullptr;

  Impl(megatron::cuda::CachingAllocator& a, size_t ws) : allocator(a), workspace_bytes(ws) {
    MT_CUBLAS_CHECK(cublasLtCreate(&handle));
  }
  ~Impl() {
    workspaces.clear();
    if (classic) cublasDestroy(classic);
    if (handle) cublasLtDestroy(handle);
  }

  void* workspace_for(cudaStream_t stream) {
    auto it = workspaces.find(stream);
    if (it == workspaces.end())
      it = workspaces
               .emplace(stream, megatron::cuda::DeviceMemory(allocator, workspace_bytes, stream))
               .first;
    return it->second.get();
  }
};

GemmContext::GemmContext(megatron::cuda::CachingAllocator& allocator, size_t workspace_bytes)
    : impl_(std::make_unique<Impl>(allocator, workspace_bytes)) {}

GemmContext::~GemmContext() = default;

size_t GemmContext::cached_algorithms() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->algos.size();
}

void GemmContext::run(const GemmArgs& a, cudaStream_t stream) {
  MT_CHECK(a.M >= 0 && a.N >= 0 && a.K >= 0 && a.batch >= 1, "gemm (CUDA): bad problem M=", a.M,
           " N=", a.N, " K=", a.K, " batch=", a.batch);
  if (a.M == 0 || a.N == 0) return;
  const cudaDataType_t ab = cuda_type(a.ab_type, "A/B");
  const cudaDataType_t ct = cuda_type(a.c_type, "C");
  MT_CHECK(a.c_type == a.ab_type || a.c_type == DType::F32, "gemm (CUDA): C dtype ",
           dtype_name(a.c_type), " with A/B ", dtype_name(a.ab_type), " (C must match or be F32)");
  MT_CHECK(!uses_bias(a.epilogue) || a.bias != nullptr, "gemm (CUDA): epilogue ",
           epilogue_name(a.epilogue), " needs a bias pointer");
  MT_CHECK(!uses_aux(a.epilogue) || (a.aux != nullptr && a.ld_aux >= a.N && a.ld_aux % 8 == 0),
           "gemm (CUDA): epilogue ", epilogue_name(a.epilogue),
           " needs an aux buffer with ld_aux >= N and ld_aux % 8 == 0 (got ld_aux=", a.ld_aux, ")");
  MT_CHECK(a.ldc >= a.N && a.lda >= (a.trans_a ? a.M : a.K) && a.ldb >= (a.trans_b ? a.K : a.N),
           "gemm (CUDA): leading dimensions too small: lda=", a.lda, " ldb=", a.ldb, " ldc=", a.ldc,
           " for M=", a.M, " N=", a.N, " K=", a.K);

  if (a.K == 0) {  // the product is empty: C = beta * C (+ bias), as the CPU gemm
    MT_CHECK(a.epilogue == GemmEpilogue::None || a.epilogue == GemmEpilogue::Bias,
             "gemm (CUDA): K == 0 with epilogue ", epilogue_name(a.epilogue));
    const int64_t total = a.batch * a.M * a.N;
    const unsigned grid = detail::grid_for(total, 256);
    const void* bias = a.epilogue == GemmEpilogue::Bias ? a.bias : nullptr;
    with_storage_type(a.c_type, "gemm (CUDA)", "C", [&](auto tag) {
      using T = typename decltype(tag)::type;
      empty_product_kernel<<<grid, 256, 0, stream>>>(static_cast<T*>(a.C), a.M, a.N, a.ldc,
                                                     a.stride_c, a.batch, a.beta,
                                                     static_cast<const T*>(bias));
    });
    MT_CUDA_LAUNCH_CHECK();
    return;
  }

  const bool tf32 = a.allow_tf32 && a.ab_type == DType::F32;
  MatmulDesc desc;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &desc.d, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M]: cuBLAS's A is our B and vice versa.
  const cublasOperation_t op_first = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  const cublasLtEpilogue_t epi = lt_epilogue(a.epilogue);
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (uses_bias(a.epilogue)) {
    const void* bias = a.bias;
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  if (uses_aux(a.epilogue)) {
    void* aux = a.aux;
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, a.ld_aux);
    if (a.batch > 1) set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, a.stride_aux);
  }

  Layout first, second, c;
  if (a.trans_b)
    make_layout(first, ab, a.K, a.N, a.ldb, a.batch, a.stride_b);
  else
    make_layout(first, ab, a.N, a.K, a.ldb, a.batch, a.stride_b);
  if (a.trans_a)
    make_layout(second, ab, a.M, a.K, a.lda, a.batch, a.stride_a);
  else
    make_layout(second, ab, a.K, a.M, a.lda, a.batch, a.stride_a);
  make_layout(c, ct, a.N, a.M, a.ldc, a.batch, a.stride_c);

  const uint32_t align_first = alignment_of(a.B), align_second = alignment_of(a.A);
  const uint32_t align_c = alignment_of(a.C);
  const std::vector<int64_t> key{a.trans_a,
                                 a.trans_b,
                                 a.M,
                                 a.N,
                                 a.K,
                                 a.lda,
                                 a.ldb,
                                 a.ldc,
                                 int64_t(a.ab_type),
                                 int64_t(a.c_type),
                                 int64_t(a.epilogue),
                                 a.ld_aux,
                                 a.batch,
                                 a.stride_a,
                                 a.stride_b,
                                 a.stride_c,
                                 a.stride_aux,
                                 tf32,
                                 align_first,
                                 align_second,
                                 align_c,
                                 uses_aux(a.epilogue) ? alignment_of(a.aux) : 0,
                                 uses_bias(a.epilogue) ? alignment_of(a.bias) : 0};

  std::lock_guard<std::mutex> lock(impl_->mutex);
  void* workspace = impl_->workspace_for(stream);
  auto it = impl_->algos.find(key);
  if (it == impl_->algos.end()) {
    Preference pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = impl_->workspace_bytes;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t aligns[4] = {align_first, align_second, align_c, align_c};
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      MT_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref.p, attrs[i], &aligns[i], sizeof(aligns[i])));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        impl_->handle, desc.d, first.l, second.l, c.l, c.l, pref.p, 1, &result, &found);
    MT_CHECK((status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED),
             "cublasLtMatmulAlgoGetHeuristic failed: ", cublasLtGetStatusName(status), " ",
             cublasLtGetStatusString(status));
    const bool none = status != CUBLAS_STATUS_SUCCESS || found == 0;
    const bool plain = a.epilogue == GemmEpilogue::None || a.epilogue == GemmEpilogue::Bias;
    MT_CHECK(!none || plain, "gemm (CUDA): cuBLASLt has no algorithm for M=", a.M, " N=", a.N,
             " K=", a.K, " trans_a=", a.trans_a, " trans_b=", a.trans_b, " lda=", a.lda,
             " ldb=", a.ldb, " ldc=", a.ldc, " A/B ", dtype_name(a.ab_type), " C ",
             dtype_name(a.c_type), " epilogue ", epilogue_name(a.epilogue), " batch ", a.batch,
             " (pointer alignments A ", align_second, " B ", align_first, " C ", align_c,
             "); use no epilogue and the element-wise kernels");
    it = impl_->algos.emplace(key, Impl::Choice{none, result.algo}).first;
  }
  if (it->second.fallback) {
    // Classic cuBLAS takes any leading dimension and alignment.
    if (!impl_->classic) MT_CUBLAS_CHECK(cublasCreate(&impl_->classic));
    MT_CUBLAS_CHECK(cublasSetStream(impl_->classic, stream));
    MT_CUBLAS_CHECK(
        cublasSetMathMode(impl_->classic, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    const float alpha = a.alpha, beta = a.beta;
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        impl_->classic, op_first, op_second, a.N, a.M, a.K, &alpha, a.B, ab, a.ldb, a.stride_b, a.A,
        ab, a.lda, a.stride_a, &beta, a.C, ct, a.ldc, a.stride_c, a.batch,
        tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (a.epilogue == GemmEpilogue::Bias) {
      const unsigned grid = detail::grid_for(a.batch * a.M * a.N, 256);
      with_storage_type(a.c_type, "gemm (CUDA)", "C", [&](auto tag) {
        using T = typename decltype(tag)::type;
        add_bias_kernel<<<grid, 256, 0, stream>>>(static_cast<T*>(a.C), a.M, a.N, a.ldc,
                                                  a.stride_c, a.batch,
                                                  static_cast<const T*>(a.bias));
      });
      MT_CUDA_LAUNCH_CHECK();
    }
    return;
  }
  const float alpha = a.alpha, beta = a.beta;
  MT_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, desc.d, &alpha, a.B, first.l, a.A, second.l, &beta,
                                 a.C, c.l, a.C, c.l, &it->second.algo, workspace,
                                 impl_->workspace_bytes, stream));
}

template <typename T>
void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C,
          int64_t ldc, const T* bias, cudaStream_t stream) {
  GemmArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.M = M;
  args.N = N;
  args.K = K;
  args.alpha = alpha;
  args.beta = beta;
  args.A = A;
  args.lda = lda;
  args.B = B;
  args.ldb = ldb;
  args.C = C;
  args.ldc = ldc;
  args.ab_type = args.c_type = detail::dtype_of<T>();
  if (bias) {
    args.epilogue = GemmEpilogue::Bias;
    args.bias = bias;
  }
  ctx.run(args, stream);
}

size_t bias_grad_workspace_bytes(int64_t M, int64_t N) {
  return static_cast<size_t>((M + kChunkRows - 1) / kChunkRows * N) * sizeof(float);
}

template <typename T>
void bias_grad(const T* dout, int64_t M, int64_t N, float* dbias, void* workspace,
               cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  MT_CHECK(workspace != nullptr, "bias_grad (CUDA): no workspace");
  MT_CHECK(chunks <= 65535, "bias_grad (CUDA): ", M, " rows exceed the grid");
  float* partial = static_cast<float*>(workspace);
  const dim3 grid(static_cast<unsigned>((N + kTileCols - 1) / kTileCols),
                  static_cast<unsigned>(chunks));
  bias_grad_partial_kernel<<<grid, kTileCols * kRowLanes, 0, stream>>>(dout, M, N, partial);
  MT_CUDA_LAUNCH_CHECK();
  bias_grad_final_kernel<<<detail::grid_for(N, 256, 1 << 30), 256, 0, stream>>>(partial, chunks, N,
                                                                                dbias);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                        \
  template void gemm<T>(GemmContext&, bool, bool, int64_t, int64_t, int64_t, float, const T*,    \
                        int64_t, const T*, int64_t, float, T*, int64_t, const T*, cudaStream_t); \
  template void bias_grad<T>(const T*, int64_t, int64_t, float*, void*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
