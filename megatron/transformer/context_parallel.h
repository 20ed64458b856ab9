#pragma once
// Context parallelism's attention core: each rank of the CP group holds two chunks of every
// sequence (kernels/common/context_chunks.h: chunks r and 2cp - 1 - r) and its rows of the fused
// qkv after rope; attention over the whole sequence needs the other ranks' keys and values.
// Three ways to get them (parallel.cp_comm_type, Megatron-Core's names):
//
//   p2p         ring attention: the packed key/value block of each rank travels around the ring
//               (a non-blocking send/receive of the next block overlaps the current block's
//               attention); each (query chunk, key chunk) pair that any query can see runs the
//               block kernel and merges by log-sum-exp; fully masked pairs are skipped. Backward
//               sends the blocks around again, with their key/value gradients, which arrive back
//               at their owner after cp hops.
//   all_gather  every rank's key/value block gathered at once (more memory, one collective);
//               the same blocks in the same order as p2p, so the same results; gradients
//               reduce-scattered.
//   a2a         Ulysses: an all-to-all gives each rank the whole sequence of G/cp query groups
//               (heads scattered, sequence gathered), the ordinary flash kernel runs on it, and
//               a second all-to-all returns each rank's rows of every head. Needs the query
//               groups per tensor-parallel rank divisible by cp.
//
// Everything runs in fp32 (bf16/fp16 activations are widened first) with the flash kernels;
// masks, documents, windows and dropout indices are those of the global positions, so the
// result is the single-process attention's to rounding (a2a: bit for bit). On the CPU or CUDA
// (the block kernels of kernels/cuda/flash_block.h; NCCL moves the blocks).
#include <map>
#include <memory>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "kernels/common/context_chunks.h"
#include "megatron/parallel/communicator.h"
#include "megatron/transformer/submodules.h"

namespace megatron {

enum class ContextParallelComm : uint8_t { P2P, AllGather, AllToAll };

// int32 row indices for the gathers and scatters that rearrange rows, by what they are for and
// the sizes they depend on (context_parallel.cpp).
using RowIndexCache = std::map<std::vector<int64_t>, Tensor>;

class ContextParallelAttention {
 public:
  // What forward keeps for backward, per layer and micro-batch: the row lse (p2p, all_gather),
  // every rank's key/value block (all_gather), the whole-sequence qkv, output and lse of this
  // rank's heads (a2a). Everything else is scratch the layers share (Scratch).
  struct State {
    Tensor lse, kv_all;
    Tensor full_qkv, full_out, full_lse;
  };

  ContextParallelAttention(parallel::Communicator& cp, ContextParallelComm comm);

  // local: the shape of this rank's rows (S = its 2 chunks; heads after tensor parallelism);
  // mb.cp: which global positions they are (mb.timeline, when set, records the exchanges). qkv
  // [S, B, G, H/G + 2, Dh] after rope, out [S, B, H * Dh], both in the activation dtype.
  void forward(State& s, const kernels::AttentionShape& local, const kernels::AttentionOptions& opt,
               const MicroBatchInfo& mb, const Tensor& qkv, Tensor& out) const;
  // dout [S, B, H * Dh] -> dqkv [S, B, G, H/G + 2, Dh] (written, not added); qkv and out as
  // forward had them.
  void backward(State& s, const kernels::AttentionShape& local,
                const kernels::AttentionOptions& opt, const MicroBatchInfo& mb, const Tensor& qkv,
                const Tensor& out, const Tensor& dout, Tensor& dqkv) const;

  parallel::Communicator& group() const { return *cp_; }
  ContextParallelComm comm() const { return comm_; }

 private:
  void ring_forward(State& s, const kernels::AttentionShape& gs,
                    const kernels::AttentionOptions& opt) const;
  void ring_backward(State& s, const kernels::AttentionShape& gs,
                     const kernels::AttentionOptions& opt) const;
  void a2a_forward(State& s, const kernels::AttentionShape& gs,
                   const kernels::AttentionOptions& opt) const;
  void a2a_backward(State& s, const kernels::AttentionShape& gs,
                    const kernels::AttentionOptions& opt) const;
  // This rank's queries against the key/value block of rank src (packed rows of its chunks).
  void attend(State& s, const kernels::AttentionShape& gs, const kernels::AttentionOptions& opt,
              const Tensor& kv, int64_t src) const;
  void attend_backward(const kernels::AttentionShape& gs, const kernels::AttentionOptions& opt,
                       const Tensor& kv, Tensor& dkv, int64_t src) const;
  kernels::AttentionBlock block(const kernels::AttentionShape& gs, int64_t q_chunk, int64_t src,
                                int64_t k_chunk) const;

  // Per call: fp32 views (or widened copies) of the layer's tensors, the travelling blocks and
  // the exchange buffers. One set for every layer of the rank (layers run one at a time).
  struct Scratch {
    Tensor q32, out32, dout32, dq32;
    Tensor kv, kv_next, dkv, dkv_all;
    Tensor blk_out, blk_lse, chunk_lse;
    Tensor full_dout, full_dqkv, send, recv;
    RowIndexCache index;
    const MicroBatchInfo* mb = nullptr;  // the call's micro-batch (its timeline)
  };
  // p2p: posts the send of this rank's current block to the next rank and the receive of the
  // previous rank's into kv_next (none at the last step); finish_hop waits for both, records
  // the exchange and makes the received block the current one.
  struct Hop {
    std::unique_ptr<parallel::Work> work;
    double start_s = 0;
  };
  Hop pass_block(int step, const Shape& kv_shape, int tag) const;
  void finish_hop(const Hop& hop) const;
  // Records [start_s, now) as a cp_exchange of the call's micro-batch when it has a timeline.
  double now() const;
  void record_exchange(double start_s) const;

  parallel::Communicator* cp_;
  ContextParallelComm comm_;
  mutable Scratch w_;
};

// The attention factory of a context-parallel model: `base`'s attention (SelfAttention) with
// this core; the MLP unchanged.
BlockSubmodules with_context_parallel(BlockSubmodules base, parallel::Communicator& cp,
                                      ContextParallelComm comm);

}  // namespace megatron
