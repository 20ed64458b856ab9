#pragma once
// The compressed all-reduce of 1-bit Adam (Tang et al., 2021; DeepSpeed's compressed_allreduce):
// vectors averaged over a group as signs plus one scale per block of kOnebitBlock elements, with
// error feedback on both sides. Each rank (worker) adds its worker error to a vector, sends each
// block's sign bits and scale ||block|| / sqrt(kOnebitBlock), and keeps buffer - scale * sign as
// the next worker error. Rank r (the server of chunk r of every vector) averages every rank's
// scale * sign of its chunk in rank order, adds its server error, compresses that again (bits
// and a scale per block; the rest its next server error) and all-gathers it: every rank ends
// with the same bits. Sign of 0 is +1.
//
// Blocks, not DeepSpeed's one scale per tensor: an embedding's rows of rare tokens carry tiny
// momenta, and one tensor-wide scale sent them +-(the tensor's RMS) divided by their tiny frozen
// variance; gpt_tiny diverged so (loss 7.8 -> 12.9 five steps after the freeze at 15). A block
// costs 4 bytes of scale per 32 bytes of bits.
//
// Several vectors (the parameters of a region) go in one all-to-all and one all-gather, each of
// its own blocks: a tensor's result does not depend on which others share its messages (the tied
// embedding copies of the first and last pipeline stages stay equal). Vector j is padded to a
// multiple of kOnebitBlock * size; chunk r of it (padded / size elements) travels as its blocks,
// each a scale (4 bytes) followed by its bits.
#include <cstdint>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron::optim {

constexpr int64_t kOnebitBlock = 256;  // elements per scale (a multiple of 8)

// buffer = error + x, kept in error; bits[i / 8] bit i % 8 = (buffer[i] >= 0); then error =
// buffer - scale * sign. Returns scale = ||buffer|| / sqrt(n) (the squares summed in double, in
// index order).
float sign_compress(const float* x, float* error, int64_t n, uint8_t* bits);
// out[i] += scale * sign(bit i).
void sign_accumulate(const uint8_t* bits, float scale, int64_t n, float* out);

class OnebitAllReduce {
 public:
  // Vectors of sizes[j] fp32 elements averaged over `group` (CPU memory).
  OnebitAllReduce(parallel::Communicator& group, std::vector<int64_t> sizes);
  // xs[j] (sizes[j] elements) becomes the compressed average of every rank's xs[j], identical
  // on every rank; a group of one leaves them as they are.
  void average(const std::vector<float*>& xs);
  // Error feedback, this rank's own: worker [sum of the padded sizes], server [that / size].
  // Their sizes depend on the group's size: a checkpoint's buffers fit only the same layout.
  Tensor& worker_error() { return worker_error_; }
  Tensor& server_error() { return server_error_; }
  // Bytes handed to collectives since the last call.
  int64_t take_bytes();

 private:
  void compress_workers(const std::vector<float*>& xs);
  void serve_chunks();
  void decompress(const std::vector<float*>& xs);

  parallel::Communicator* group_;
  std::vector<int64_t> sizes_, padded_at_;  // padded_at_: sizes_.size() + 1 offsets
  int64_t chunk_elements_ = 0;              // of one rank's chunks of all vectors
  int64_t message_ = 0;                     // bytes of them as blocks
  Tensor worker_error_, server_error_, send_, recv_, gathered_;
  std::vector<float> buffer_;
  int64_t bytes_ = 0;
};

}  // namespace megatron::optim
