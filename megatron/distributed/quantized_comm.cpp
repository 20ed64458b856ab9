#include "megatron/distributed/quantized_comm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/core/error.h"

namespace megatron::distributed {
namespace {

int64_t blocks_of(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

float load(const void* x, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32:
      return static_cast<const float*>(x)[i];
    case DType::BF16:
      return math::bf16_bits_to_float(static_cast<const uint16_t*>(x)[i]);
    case DType::F16:
      return math::fp16_bits_to_float(static_cast<const uint16_t*>(x)[i]);
    default:
      MT_CHECK(false, "int8 quantisation of ", dtype_name(dtype), " tensors");
  }
  return 0.0f;
}

void store(void* out, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::F32:
      static_cast<float*>(out)[i] = v;
      return;
    case DType::BF16:
      static_cast<uint16_t*>(out)[i] = math::float_to_bf16_bits(v);
      return;
    case DType::F16:
      static_cast<uint16_t*>(out)[i] = math::float_to_fp16_bits(v);
      return;
    default:
      MT_CHECK(false, "int8 dequantisation into ", dtype_name(dtype), " tensors");
  }
}

float scale_at(const uint8_t* in, int64_t b) {
  float s;
  std::memcpy(&s, in + b * static_cast<int64_t>(sizeof(float)), sizeof(float));
  return s;
}

}  // namespace

int64_t quantized_bytes(int64_t n) {
  return blocks_of(n) * static_cast<int64_t>(sizeof(float)) + n;
}

void quantize_int8(const void* x, DType dtype, int64_t n, uint8_t* out) {
  const int64_t blocks = blocks_of(n);
  auto* values = reinterpret_cast<int8_t*>(out + blocks * static_cast<int64_t>(sizeof(float)));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kQuantBlock, end = std::min(n, begin + kQuantBlock);
    float absmax = 0.0f;
    for (int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(load(x, dtype, i)));
    const float scale = absmax / 127.0f;
    std::memcpy(out + b * static_cast<int64_t>(sizeof(float)), &scale, sizeof(float));
    const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const float q = std::nearbyint(load(x, dtype, i) * inverse);
      values[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void dequantize_int8(const uint8_t* in, int64_t n, DType dtype, void* out) {
  const int64_t blocks = blocks_of(n);
  const auto* values =
      reinterpret_cast<const int8_t*>(in + blocks * static_cast<int64_t>(sizeof(float)));
  for (int64_t i = 0; i < n; ++i)
    store(out, dtype, i, static_cast<float>(values[i]) * scale_at(in, i / kQuantBlock));
}

void dequantize_add_int8(const uint8_t* in, int64_t n, float* out) {
  const int64_t blocks = blocks_of(n);
  const auto* values =
      reinterpret_cast<const int8_t*>(in + blocks * static_cast<int64_t>(sizeof(float)));
  for (int64_t i = 0; i < n; ++i)
    out[i] += static_cast<float>(values[i]) * scale_at(in, i / kQuantBlock);
}

QuantizedGather start_quantized_gather(parallel::Communicator& group, const Tensor& shard) {
  MT_CHECK(shard.device() == Device::CPU, "quantised gathers run on the CPU only so far");
  const int64_t n = shard.numel(), bytes = quantized_bytes(n);
  QuantizedGather q;
  q.send = Tensor::empty({bytes}, DType::U8);
  q.recv = Tensor::empty({group.size() * bytes}, DType::U8);
  quantize_int8(shard.raw(), shard.dtype(), n, q.send.data<uint8_t>());
  q.work = group.all_gather_async(q.send, q.recv);
  return q;
}

void finish_quantized_gather(QuantizedGather& q, Tensor& out) {
  q.work->wait();
  const int64_t bytes = q.send.numel(), ranks = q.recv.numel() / bytes;
  const int64_t n = out.numel() / ranks;
  MT_CHECK(n * ranks == out.numel() && quantized_bytes(n) == bytes, "quantised gather of ", ranks,
           " x ", bytes, " bytes into ", out.numel(), " elements");
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t r = 0; r < ranks; ++r)
    dequantize_int8(q.recv.data<uint8_t>() + r * bytes, n, out.dtype(),
                    dst + static_cast<size_t>(r * n) * dtype_size(out.dtype()));
  q = QuantizedGather();
}

QuantizedReduceScatter start_quantized_reduce_scatter(parallel::Communicator& group,
                                                      const Tensor& full, int tag) {
  MT_CHECK(full.device() == Device::CPU && full.dtype() == DType::F32,
           "quantised reduce-scatters take fp32 CPU tensors");
  const int w = group.size(), me = group.rank();
  QuantizedReduceScatter q;
  q.n = full.numel() / w;
  MT_CHECK(q.n * w == full.numel(), "reduce-scatter of ", full.numel(), " over ", w, " ranks");
  const int64_t bytes = quantized_bytes(q.n);
  q.send = Tensor::empty({w * bytes}, DType::U8);
  q.recv = Tensor::empty({w * bytes}, DType::U8);
  std::vector<parallel::P2POp> ops;
  for (int r = 0; r < w; ++r) {
    uint8_t* chunk = q.send.data<uint8_t>() + r * bytes;
    quantize_int8(full.data<float>() + r * q.n, DType::F32, q.n, chunk);
    if (r == me) {  // this rank's own chunk stays here
      std::memcpy(q.recv.data<uint8_t>() + r * bytes, chunk, static_cast<size_t>(bytes));
      continue;
    }
    ops.push_back({parallel::P2POp::Send, q.send.flat_view(r * bytes, {bytes}), r, tag});
    ops.push_back({parallel::P2POp::Recv, q.recv.flat_view(r * bytes, {bytes}), r, tag});
  }
  q.work = group.batch_isend_irecv(std::move(ops));
  return q;
}

void finish_quantized_reduce_scatter(QuantizedReduceScatter& q, parallel::Communicator& group,
                                     Tensor& shard) {
  q.work->wait();
  const int64_t bytes = quantized_bytes(q.n);
  MT_CHECK(shard.numel() == q.n && shard.dtype() == DType::F32, "quantised reduce-scatter of ", q.n,
           " elements into ", shard.numel());
  float* out = shard.data<float>();
  std::fill(out, out + q.n, 0.0f);
  for (int r = 0; r < group.size(); ++r)
    dequantize_add_int8(q.recv.data<uint8_t>() + r * bytes, q.n, out);
  q = QuantizedReduceScatter();
}

}  // namespace megatron::distributed
