#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"

namespace megatron::kernels::cuda {
namespace {

constexpr int kMaxTensors = 24;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;
// Blocks per chunk: 4096 elements each, so that a launch keeps every SM full of loads in flight
// (one 512-thread block per 64K chunk reached a fifth of an H200's memory bandwidth).
constexpr int kSplit = 16;
constexpr int64_t kPart = kChunk / kSplit;
constexpr int kAdamThreads = 256;

// Passed by value as the kernel argument (< 4 KiB).
struct AdamWList {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  __nv_bfloat16* copy[kMaxTensors];
  int64_t n[kMaxTensors];
  float wd_mult[kMaxTensors];
  int32_t chunk_of_block[kMaxBlocks];
  uint8_t tensor_of_block[kMaxBlocks];
};
static_assert(sizeof(AdamWList) + sizeof(math::AdamWParams) + 8 < 4000, "kernel argument size");

__global__ void adamw_kernel(AdamWList list, math::AdamWParams p, float grad_scale) {
  const int entry = blockIdx.x / kSplit, part = blockIdx.x % kSplit;
  const int t = list.tensor_of_block[entry];
  const int64_t start = int64_t(list.chunk_of_block[entry]) * kChunk + part * kPart;
  const int64_t n = list.n[t];
  const int64_t end = start + kPart < n ? start + kPart : n;
  float* param = list.param[t];
  const float* grad = list.grad[t];
  float* m = list.m[t];
  float* v = list.v[t];
  __nv_bfloat16* copy = list.copy[t];
  math::AdamWParams hp = p;
  hp.weight_decay = p.weight_decay * list.wd_mult[t];
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    float w = param[i], mi = m[i], vi = v[i];
    const float g = grad_scale == 1.0f ? grad[i] : grad[i] * grad_scale;
    math::adamw_update(w, g, mi, vi, hp);
    param[i] = w;
    m[i] = mi;
    v[i] = vi;
    if (copy) copy[i] = __float2bfloat16_rn(w);
  }
}

constexpr int kSumBlocks = 256;
constexpr int kSumThreads = 256;

template <typename T>
__global__ void sum_squares_partial_kernel(const T* __restrict__ x, int64_t n,
                                           double* __restrict__ partial) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(detail::to_float(x[i]));
    s += v * v;
  }
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_final_kernel(const double* __restrict__ partial, int64_t count,
                                 double* __restrict__ out) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void multi_tensor_adamw(const std::vector<AdamWTensor>& tensors, const math::AdamWParams& p,
                        float grad_scale, cudaStream_t stream) {
  AdamWList list{};
  int num_tensors = 0, num_blocks = 0;
  auto launch = [&] {
    if (num_blocks > 0) {
      adamw_kernel<<<num_blocks * kSplit, kAdamThreads, 0, stream>>>(list, p, grad_scale);
      MT_CUDA_LAUNCH_CHECK();
    }
    num_tensors = 0;
    num_blocks = 0;
  };
  for (const AdamWTensor& t : tensors) {
    if (t.n <= 0) continue;
    MT_CHECK(t.param && t.grad && t.m && t.v, "multi_tensor_adamw: null pointer in a tensor of ",
             t.n, " elements");
    const int64_t chunks = (t.n + kChunk - 1) / kChunk;
    MT_CHECK(chunks <= 0x7fffffff, "multi_tensor_adamw: tensor of ", t.n, " elements too large");
    bool listed = false;  // whether t is in the current launch's table
    for (int64_t c = 0; c < chunks; ++c) {
      if (num_blocks == kMaxBlocks) {
        launch();  // the tensor continues in the next launch: it is listed again below
        listed = false;
      }
      if (!listed) {
        if (num_tensors == kMaxTensors) launch();
        listed = true;
        list.param[num_tensors] = t.param;
        list.grad[num_tensors] = t.grad;
        list.m[num_tensors] = t.m;
        list.v[num_tensors] = t.v;
        list.copy[num_tensors] = t.param_bf16;
        list.n[num_tensors] = t.n;
        list.wd_mult[num_tensors] = t.wd_mult;
        ++num_tensors;
      }
      list.tensor_of_block[num_blocks] = static_cast<uint8_t>(num_tensors - 1);
      list.chunk_of_block[num_blocks] = static_cast<int32_t>(c);
      ++num_blocks;
    }
  }
  launch();
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p, cudaStream_t stream) {
  AdamWTensor t{param, grad, m, v, n};
  multi_tensor_adamw({t}, p, 1.0f, stream);
}

size_t sum_squares_workspace_bytes(int num_tensors) {
  return static_cast<size_t>(num_tensors > 0 ? num_tensors : 1) * kSumBlocks * sizeof(double);
}

template <typename T>
void multi_tensor_sum_squares(const std::vector<const T*>& tensors,
                              const std::vector<int64_t>& sizes, double* out_device,
                              void* workspace, cudaStream_t stream) {
  MT_CHECK(tensors.size() == sizes.size(), "multi_tensor_sum_squares: ", tensors.size(),
           " tensors but ", sizes.size(), " sizes");
  MT_CHECK(workspace != nullptr, "multi_tensor_sum_squares: no workspace");
  double* partial = static_cast<double*>(workspace);
  const int64_t count = static_cast<int64_t>(tensors.size());
  if (count == 0) {
    MT_CUDA_CHECK(cudaMemsetAsync(out_device, 0, sizeof(double), stream));
    return;
  }
  for (int64_t t = 0; t < count; ++t) {
    double* slot = partial + t * kSumBlocks;
    if (sizes[t] <= 0) {
      MT_CUDA_CHECK(cudaMemsetAsync(slot, 0, kSumBlocks * sizeof(double), stream));
      continue;
    }
    // Always kSumBlocks blocks (some may see no element): a fixed layout for any size.
    sum_squares_partial_kernel<<<kSumBlocks, kSumThreads, 0, stream>>>(tensors[t], sizes[t], slot);
    MT_CUDA_LAUNCH_CHECK();
  }
  sum_final_kernel<<<1, 1024, 0, stream>>>(partial, count * kSumBlocks, out_device);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void sum_squares(const T* x, int64_t n, double* out_device, void* workspace, cudaStream_t stream) {
  multi_tensor_sum_squares<T>(std::vector<const T*>{x}, std::vector<int64_t>{n}, out_device,
                              workspace, stream);
}

#define MT_INSTANTIATE(T)                                                                       \
  template void multi_tensor_sum_squares<T>(                                                    \
      const std::vector<const T*>&, const std::vector<int64_t>&, double*, void*, cudaStream_t); \
  template void sum_squares<T>(const T*, int64_t, double*, void*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
