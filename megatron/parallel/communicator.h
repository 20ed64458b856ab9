#pragma once
// Collective communication over one process group. Layers and the optimizer receive the
// communicator of the group they need (tp, dp, ...) explicitly; nothing is global.
// All collectives are in place or write caller-provided buffers; async variants return a
// handle whose wait() completes the operation.
#include <memory>

#include "megatron/core/tensor.h"

namespace megatron::parallel {

enum class ReduceOp { Sum, Avg, Max };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) = 0;
  // out holds size() * in.numel() elements, rank r's input at offset r * in.numel().
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in holds size() * out.numel() elements; rank r receives the reduced chunk r.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
};

// The group of one process: every collective is the identity (Avg/Max of one value is itself).
std::unique_ptr<Communicator> make_single_process_communicator();

}  // namespace megatron::parallel
