#pragma once
// Top-k gradient sparsification with error feedback (parallel.grad_compression: topk; Aji &
// Heafield 2017, Lin et al. 2018's deep gradient compression without its momentum tricks): per
// bucket each data-parallel rank adds its residual to the gradient, sends the k = ceil(ratio n)
// entries of largest magnitude (indices and values), keeps the rest as the next residual, and
// every rank sums all ranks' sparse sets, in rank order, into the whole bucket: the same bits
// on every rank. A selected entry leaves the residual at exactly 0, so sent + residual is the
// accumulated gradient exactly.
#include <cstdint>

namespace megatron::optim {

// Entries sent of a bucket of n: ceil(ratio n), at least 1 and at most n.
int64_t topk_keep(int64_t n, double ratio);

// acc = grads + residual; packed [2k] int32 gets the k largest |acc| (ties: the lower index),
// indices ascending, then their values' float bits; residual = acc with those entries zeroed.
void topk_compress(const float* grads, float* residual, int64_t n, int64_t k, int32_t* packed);

// grads [n] = the sum of `ranks` packed sets (gathered [ranks, 2k]), added in rank order.
void topk_decompress(const int32_t* gathered, int64_t ranks, int64_t k, float* grads, int64_t n);

}  // namespace megatron::optim
