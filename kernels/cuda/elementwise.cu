#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

#define MT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  MT_GRID_STRIDE(i, n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <typename TAcc, typename TX>
__global__ void add_inplace_kernel(TAcc* acc, const TX* x, int64_t n) {
  MT_GRID_STRIDE(i, n) acc[i] = from_float<TAcc>(to_float(acc[i]) + to_float(x[i]));
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t rows, int64_t n) {
  MT_GRID_STRIDE(i, rows * n) y[i] = from_float<T>(to_float(y[i]) + to_float(bias[i % n]));
}

template <typename T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  MT_GRID_STRIDE(i, n) x[i] = from_float<T>(to_float(x[i]) * s);
}

template <typename T>
__global__ void fill_kernel(T* x, float value, int64_t n) {
  const T v = from_float<T>(value);
  MT_GRID_STRIDE(i, n) x[i] = v;
}

template <typename TSrc, typename TDst>
__global__ void cast_kernel(const TSrc* src, TDst* dst, int64_t n) {
  MT_GRID_STRIDE(i, n) dst[i] = from_float<TDst>(to_float(src[i]));
}

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n, math::Gelu kind) {
  MT_GRID_STRIDE(i, n) y[i] = from_float<T>(math::gelu(to_float(x[i]), kind));
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n, math::Gelu kind) {
  MT_GRID_STRIDE(i, n)
  dx[i] = from_float<T>(to_float(dy[i]) * math::gelu_grad(to_float(x[i]), kind));
}

template <typename T>
__global__ void tanh_forward_kernel(const T* x, T* y, int64_t n) {
  MT_GRID_STRIDE(i, n) y[i] = from_float<T>(tanhf(to_float(x[i])));
}

template <typename T>
__global__ void tanh_backward_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const float o = to_float(y[i]);
    dx[i] = from_float<T>(to_float(dy[i]) * (1.0f - o * o));
  }
}

template <typename T>
__global__ void count_outside_kernel(const T* x, int64_t n, float limit,
                                     unsigned long long* count) {
  unsigned long long c = 0;
  MT_GRID_STRIDE(i, n) c += !(fabsf(to_float(x[i])) <= limit);
  if (c != 0) atomicAdd(count, c);
}

template <typename T>
__global__ void glu_forward_kernel(const T* x, T* y, int64_t rows, int64_t F, math::Glu glu) {
  MT_GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i - r * F;
    const T* gate = x + r * 2 * F;
    y[i] = from_float<T>(math::glu_value(to_float(gate[j]), to_float(gate[F + j]), glu));
  }
}

template <typename T>
__global__ void glu_backward_kernel(const T* x, const T* dy, T* dx, int64_t rows, int64_t F,
                                    math::Glu glu) {
  MT_GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i - r * F;
    const float g = to_float(x[r * 2 * F + j]), u = to_float(x[r * 2 * F + F + j]);
    float dg, du;
    math::glu_grads(g, u, to_float(dy[i]), glu, dg, du);
    dx[r * 2 * F + j] = from_float<T>(dg);
    dx[r * 2 * F + F + j] = from_float<T>(du);
  }
}

// The hot element-wise ops (GELU, residual adds, casts) move eight elements per thread and
// iteration as whole 16-byte (bf16/fp16) or 32-byte (fp32) groups: one 2-byte access per thread
// left an H200's memory bandwidth mostly idle (GELU forward at a quarter of it). They run when
// every pointer is group-aligned; the kernels above take the rest.
constexpr int kGroup = 8;

template <typename T>
struct alignas(sizeof(T) * kGroup) Group {
  T v[kGroup];
};

template <typename T>
bool group_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kGroup) == 0;
}

// out[i] = op(a[i]): whole groups, then the n % kGroup tail element by element.
template <typename TOut, typename TA, typename Op>
__global__ void map1_kernel(const TA* a, TOut* out, int64_t n, Op op) {
  const int64_t groups = n / kGroup;
  MT_GRID_STRIDE(g, groups) {
    const Group<TA> x = reinterpret_cast<const Group<TA>*>(a)[g];
    Group<TOut> y;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) y.v[k] = from_float<TOut>(op(to_float(x.v[k])));
    reinterpret_cast<Group<TOut>*>(out)[g] = y;
  }
  MT_GRID_STRIDE(t, n - groups * kGroup) {
    const int64_t i = groups * kGroup + t;
    out[i] = from_float<TOut>(op(to_float(a[i])));
  }
}

// out[i] = op(a[i], b[i]) (out may be a: in-place accumulation).
template <typename TOut, typename TA, typename TB, typename Op>
__global__ void map2_kernel(const TA* a, const TB* b, TOut* out, int64_t n, Op op) {
  const int64_t groups = n / kGroup;
  MT_GRID_STRIDE(g, groups) {
    const Group<TA> x = reinterpret_cast<const Group<TA>*>(a)[g];
    const Group<TB> z = reinterpret_cast<const Group<TB>*>(b)[g];
    Group<TOut> y;
#pragma unroll
    for (int k = 0; k < kGroup; ++k)
      y.v[k] = from_float<TOut>(op(to_float(x.v[k]), to_float(z.v[k])));
    reinterpret_cast<Group<TOut>*>(out)[g] = y;
  }
  MT_GRID_STRIDE(t, n - groups * kGroup) {
    const int64_t i = groups * kGroup + t;
    out[i] = from_float<TOut>(op(to_float(a[i]), to_float(b[i])));
  }
}

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct IdentityOp {
  __device__ float operator()(float a) const { return a; }
};
struct GeluOp {
  math::Gelu kind;
  __device__ float operator()(float x) const { return math::gelu(x, kind); }
};
struct GeluGradOp {  // (x, dy) -> dx
  math::Gelu kind;
  __device__ float operator()(float x, float dy) const { return dy * math::gelu_grad(x, kind); }
};

#undef MT_GRID_STRIDE

unsigned blocks_for(int64_t n) { return detail::grid_for(n, kThreads); }

// Whether the grouped kernel ran (false: the pointers are not group-aligned).
template <typename TOut, typename TA, typename Op>
bool map1(const TA* a, TOut* out, int64_t n, Op op, cudaStream_t stream) {
  if (n < kGroup || !group_aligned(a) || !group_aligned(out)) return false;
  map1_kernel<<<blocks_for(n / kGroup), kThreads, 0, stream>>>(a, out, n, op);
  MT_CUDA_LAUNCH_CHECK();
  return true;
}

template <typename TOut, typename TA, typename TB, typename Op>
bool map2(const TA* a, const TB* b, TOut* out, int64_t n, Op op, cudaStream_t stream) {
  if (n < kGroup || !group_aligned(a) || !group_aligned(b) || !group_aligned(out)) return false;
  map2_kernel<<<blocks_for(n / kGroup), kThreads, 0, stream>>>(a, b, out, n, op);
  MT_CUDA_LAUNCH_CHECK();
  return true;
}

}  // namespace

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  if (n <= 0 || map2(a, b, out, n, AddOp{}, stream)) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, out, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename TAcc, typename TX>
void add_inplace(TAcc* acc, const TX* x, int64_t n, cudaStream_t stream) {
  if (n <= 0 || map2(acc, x, acc, n, AddOp{}, stream)) return;
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, stream>>>(acc, x, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void add_bias(T* y, const T* bias, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  add_bias_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(y, bias, rows, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void scale_inplace(T* x, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, s, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void fill(T* x, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, value, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename TSrc, typename TDst>
void cast(const TSrc* src, TDst* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0 || map1(src, dst, n, IdentityOp{}, stream)) return;
  cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, dst, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, math::Gelu kind, cudaStream_t stream) {
  if (n <= 0 || map1(x, y, n, GeluOp{kind}, stream)) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, kind);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, math::Gelu kind,
                   cudaStream_t stream) {
  if (n <= 0 || map2(x, dy, dx, n, GeluGradOp{kind}, stream)) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, dy, dx, n, kind);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void tanh_forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  tanh_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void tanh_backward(const T* y, const T* dy, T* dx, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  tanh_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, dy, dx, n);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void count_outside(const T* x, int64_t n, float limit, unsigned long long* count,
                   cudaStream_t stream) {
  if (n <= 0) return;
  count_outside_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, limit, count);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void glu_forward(const T* x, T* y, int64_t rows, int64_t F, math::Glu glu, cudaStream_t stream) {
  if (rows <= 0 || F <= 0) return;
  glu_forward_kernel<<<blocks_for(rows * F), kThreads, 0, stream>>>(x, y, rows, F, glu);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, math::Glu glu,
                  cudaStream_t stream) {
  if (rows <= 0 || F <= 0) return;
  glu_backward_kernel<<<blocks_for(rows * F), kThreads, 0, stream>>>(x, dy, dx, rows, F, glu);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                      \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);                         \
  template void add_bias<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                     \
  template void scale_inplace<T>(T*, float, int64_t, cudaStream_t);                            \
  template void fill<T>(T*, float, int64_t, cudaStream_t);                                     \
  template void gelu_forward<T>(const T*, T*, int64_t, math::Gelu, cudaStream_t);              \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, math::Gelu, cudaStream_t);   \
  template void tanh_forward<T>(const T*, T*, int64_t, cudaStream_t);                          \
  template void count_outside<T>(const T*, int64_t, float, unsigned long long*, cudaStream_t); \
  template void tanh_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);               \
  template void glu_forward<T>(const T*, T*, int64_t, int64_t, math::Glu, cudaStream_t);       \
  template void glu_backward<T>(const T*, const T*, T*, int64_t, int64_t, math::Glu,           \
                                cudaStream_t);                                                 \
  template void add_inplace<T, T>(T*, const T*, int64_t, cudaStream_t);                        \
  template void cast<T, float>(const T*, float*, int64_t, cudaStream_t);                       \
  template void cast<T, __nv_bfloat16>(const T*, __nv_bfloat16*, int64_t, cudaStream_t);       \
  template void cast<T, __half>(const T*, __half*, int64_t, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE
template void add_inplace<float, __nv_bfloat16>(float*, const __nv_bfloat16*, int64_t,
                                                cudaStream_t);
template void add_inplace<float, __half>(float*, const __half*, int64_t, cudaStream_t);

}  // namespace megatron::kernels::cuda
