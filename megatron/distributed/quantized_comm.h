#pragma once
// ZeRO++'s quantised communication (Wang et al., 2023; parallel.zero_quantized_weights and
// parallel.zero_quantized_gradients): a vector travels as int8 in blocks of kQuantBlock elements,
// each with an fp32 scale absmax / 127 (round to nearest; a block of zeros has scale 0). The
// message of n elements is ceil(n / kQuantBlock) scales followed by n int8 values: about a
// quarter of fp32's bytes, half of bf16's. Every rank decodes the same bytes, so weights gathered
// this way are identical everywhere; the fp32 master shards the optimizer steps stay exact.
#include <cstdint>
#include <memory>

#include "megatron/core/dtype.h"
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron::distributed {

constexpr int64_t kQuantBlock = 256;

// Bytes of the message of n elements.
int64_t quantized_bytes(int64_t n);
// x: n elements of `dtype` (F32, BF16 or F16 storage) -> out [quantized_bytes(n)].
void quantize_int8(const void* x, DType dtype, int64_t n, uint8_t* out);
// in -> out: n elements of `dtype`, overwritten.
void dequantize_int8(const uint8_t* in, int64_t n, DType dtype, void* out);
// in -> out [n] fp32, added (reduce-scatter's sum over the ranks' messages).
void dequantize_add_int8(const uint8_t* in, int64_t n, float* out);

// An all-gather of every rank's shard as int8 (qwZ): started, then finished into `out` (size x
// the shard's elements, the shard's dtype). CPU memory.
struct QuantizedGather {
  Tensor send, recv;
  std::unique_ptr<parallel::Work> work;
};
QuantizedGather start_quantized_gather(parallel::Communicator& group, const Tensor& shard);
void finish_quantized_gather(QuantizedGather& q, Tensor& out);

// A reduce-scatter (sum) of fp32 `full` (size x n) as int8 (qgZ): chunk r quantised and sent to
// rank r (point to point, `tag`), the received chunks decoded and summed in rank order into
// `shard` [n] (overwritten).
struct QuantizedReduceScatter {
  Tensor send, recv;
  int64_t n = 0;
  std::unique_ptr<parallel::Work> work;
};
QuantizedReduceScatter start_quantized_reduce_scatter(parallel::Communicator& group,
                                                      const Tensor& full, int tag);
void finish_quantized_reduce_scatter(QuantizedReduceScatter& q, parallel::Communicator& group,
                                     Tensor& shard);

}  // namespace megatron::distributed
