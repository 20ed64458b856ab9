#pragma once
// Communicator over NCCL for CUDA tensors (Device::CUDA; CPU tensors belong to
// MpiCommunicator and are rejected here with an error that says so).
//
// Construction is collective over an MPI communicator holding the group's members: rank 0
// creates the NCCL unique id, MPI_Bcast hands it to the others, and every member calls
// ncclCommInitRank on its current CUDA device (select it first, e.g. with
// megatron::cuda::select_device_for_local_rank). One NcclCommunicator per process group (world,
// tp, dp, ...), each made from that group's MPI communicator. NCCL needs one GPU per rank: two
// ranks of a group on the same GPU fail in ncclCommInitRank.
//
// Streams and completion (the usual CUDA semantics; the host is not blocked):
//  - Each operation runs on the communicator's own stream, after all work queued so far on the
//    compute stream, so it sees the compute stream's results. The compute stream is the one
//    given to set_compute_stream or, by default, the CUDA backend's current stream of the
//    calling thread at the time of the call (runtime.h: the legacy default stream 0 unless a
//    StreamGuard says otherwise), i.e. the stream ops:: and CUDA tensor copies use.
//  - A blocking call (all_reduce, all_gather, ...) makes the compute stream wait for the
//    operation: later work on the compute stream sees the result. The host returns at once;
//    read results on the host after synchronising the compute stream (a cudaMemcpy on the legacy
//    default stream does this when the compute stream is the default stream).
//  - An async call returns a Work holding a CUDA event recorded on the communicator's stream
//    (and the buffers' storage, when owning tensors are passed); wait() makes the compute stream
//    wait for it. Destroying an unwaited Work waits. Buffers must stay alive until the operation
//    has run on the GPU: freeing them in compute-stream order after wait() is safe.
//  - set_blocking_wait(true) makes every blocking call and Work::wait() also block the host
//    until the operation is complete (debugging, tests).
//  - barrier() blocks the host until every member has reached it and all queued communication
//    of this rank has completed (an all-reduce of one element, then a stream sync).
//  - Host waits poll under a watchdog: an operation that has not completed after timeout_s
//    seconds (resolve_comm_timeout_s: MEGATRON_COMM_TIMEOUT_S overrides) prints
//    "rank R: collective <op> on group <name> timed out after T s" and calls
//    MPI_Abort(MPI_COMM_WORLD, 3), as MpiCommunicator does; an asynchronous NCCL error aborts
//    the NCCL communicator and throws megatron::Error with NCCL's message.
//
// Dtypes: every dtype can be moved. Reductions: F32, F64, BF16, F16, I64, I32, I8, U8 (NCCL
// reduces bf16/fp16 natively, unlike the CPU communicators); I16/U16 reductions are rejected
// (NCCL has no 16-bit integer type). Avg needs a floating dtype (ncclAvg).
// Point-to-point: tags are ignored; messages between a pair match in posting order.
#include <cuda_runtime.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/parallel/mpi_communicator.h"

struct ncclComm;

namespace megatron::cuda {

class NcclCommunicator final : public parallel::Communicator {
 public:
  // Collective over `comm`'s members (the MPI communicator is used only here, not kept).
  NcclCommunicator(MPI_Comm comm, std::string name,
                   double timeout_s = parallel::kDefaultCommTimeoutS);
  // Same members, rank order, name and timeout as `group`.
  explicit NcclCommunicator(const parallel::MpiCommunicator& group);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override;

  void set_compute_stream(cudaStream_t stream) {
    compute_stream_ = stream;
    fixed_compute_stream_ = true;
  }
  // The stream set above, else the calling thread's current stream (runtime.h).
  cudaStream_t compute_stream() const;
  cudaStream_t comm_stream() const { return comm_stream_; }
  void set_blocking_wait(bool blocking) { blocking_wait_ = blocking; }
  int device() const { return device_; }
  // Blocks the host until all communication queued so far has completed (watchdog as above).
  void synchronize();

  void all_reduce(Tensor& t, parallel::ReduceOp op) override;
  std::unique_ptr<parallel::Work> all_reduce_async(Tensor& t, parallel::ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<parallel::Work> all_gather_async(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, parallel::ReduceOp op) override;
  std::unique_ptr<parallel::Work> reduce_scatter_async(const Tensor& in, Tensor& out,
                                                       parallel::ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override;
  std::unique_ptr<parallel::Work> batch_isend_irecv(std::vector<parallel::P2POp> ops) override;

 private:
  class NcclWork;
  void init(MPI_Comm comm);
  void begin();  // comm stream waits for the compute stream
  // Records completion; returns the Work (keeping `keep` alive) or, for blocking calls, makes
  // the compute stream wait for it.
  std::unique_ptr<parallel::Work> finish(std::vector<Tensor> keep);
  void complete_blocking();
  void check_tensor(const Tensor& t, const char* op) const;
  void host_wait(cudaEvent_t event, const char* op);
  void check_async_error();
  [[noreturn]] void timed_out(const char* op, double waited_s) const;

  ncclComm* comm_ = nullptr;
  std::string name_;
  double timeout_s_;
  int rank_ = 0, size_ = 1, device_ = 0;
  std::vector<int> world_ranks_;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;
  bool fixed_compute_stream_ = false;
  bool blocking_wait_ = false;
  void* barrier_buffer_ = nullptr;  // one float on the device
};

}  // namespace megatron::cuda
