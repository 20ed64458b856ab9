#pragma once
// Collective communication over one process group. Layers and the optimizer receive the
// communicator of the group they need (tp, dp, ...) explicitly; nothing is global.
//
// Conventions shared by every implementation:
//  - All collectives are in place or write caller-provided buffers. Every member of the group
//    must call the same collectives in the same order with matching sizes.
//  - Buffers are flat: only numel() and dtype() matter, never the shape.
//  - Async variants return a Work whose wait() completes the operation. The buffers (and the
//    communicator) must stay alive until wait() returns; a Work keeps owning tensors' storage
//    alive itself, but views made with Tensor::wrap are the caller's to keep. Destroying a Work
//    that was never waited waits for it.
//  - Zero-length buffers are fine everywhere.
//  - Dtypes: every dtype can be moved (all_gather, broadcast, all_to_all, p2p). Reductions
//    support F32, F64, I64, I32, I16, I8, U16, U8; BF16/F16 reductions are rejected (reduce
//    in fp32). ReduceOp::Avg (sum, then divide by size()) needs a floating dtype.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/core/tensor.h"

namespace megatron::parallel {

enum class ReduceOp { Sum, Avg, Max, Min };
std::string_view reduce_op_name(ReduceOp op);
// Throws megatron::Error naming `where` when `op` cannot reduce `dtype`.
void check_reduce_dtype(DType dtype, ReduceOp op, std::string_view where);

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

// One send or receive of a batch_isend_irecv. peer is a rank within the communicator's group.
// Messages between the same pair with the same tag match in the order they were posted.
struct P2POp {
  enum Kind { Send, Recv } kind;
  Tensor buffer;
  int peer;
  int tag = 0;  // 0 <= tag <= 32767
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name for messages ("world", "tp", "dp", ...).
  virtual const std::string& name() const = 0;
  // World rank of the member with rank `group_rank` in this group.
  virtual int world_rank_of(int group_rank) const = 0;

  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) = 0;
  // out holds size() * in.numel() elements, rank r's input at offset r * in.numel().
  // in may be out's own chunk rank() (in place).
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  virtual std::unique_ptr<Work> all_gather_async(const Tensor& in, Tensor& out) = 0;
  // in holds size() * out.numel() elements; rank r receives the reduced chunk r.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out,
                                                     ReduceOp op) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Uneven all-to-all in element counts: this rank sends in[sum(send_counts[<r]) ...]
  // (send_counts[r] elements) to rank r and receives recv_counts[r] elements from rank r into out,
  // packed in rank order. Both count vectors have size() entries (zeros allowed) and must sum to
  // in.numel() and out.numel(); recv_counts[r] here must equal send_counts[rank()] on rank r.
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                          const std::vector<int64_t>& recv_counts) = 0;
  // Posts every send and receive at once (no ordering deadlocks); wait() completes them all.
  virtual std::unique_ptr<Work> batch_isend_irecv(std::vector<P2POp> ops) = 0;
};

// The group of one process: every collective is the identity (Avg/Max/Min of one value is
// itself; no arithmetic happens, so any dtype works except Avg on integers), all_gather,
// reduce_scatter and all_to_all copy. Point-to-point has no peer: a non-empty batch is an
// error. `world_rank` is what world_rank_of(0) reports.
std::unique_ptr<Communicator> make_single_process_communicator(std::string name = "single",
                                                               int world_rank = 0);

// Every rank's `mine` (e.g. its node name), in rank order: one all-gather of fixed-width records
// of `width` bytes; InputError naming `what` for a string that does not fit.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine,
                                            const char* what, int64_t width = 256);

}  // namespace megatron::parallel
