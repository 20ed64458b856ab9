#include "megatron/backend/cuda/nccl_communicator.h"

#include <nccl.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/runtime.h"

namespace megatron::cuda {
namespace {

using parallel::ReduceOp;
using Clock = std::chrono::steady_clock;

// NCCL's type for reductions of `t`; throws for the types NCCL cannot reduce.
ncclDataType_t reduce_type(DType t, ReduceOp op, const std::string& group, const char* what) {
  MT_CHECK(op != ReduceOp::Avg || dtype_is_float(t), what, " on group ", group,
           ": avg-reduction needs a floating dtype, got ", dtype_name(t),
           " (use sum and divide yourself)");
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I64:
      return ncclInt64;
    case DType::I32:
      return ncclInt32;
    case DType::I8:
      return ncclInt8;
    case DType::U8:
      return ncclUint8;
    case DType::I16:
    case DType::U16:
      break;
  }
  MT_CHECK(false, what, " on group ", group, ": NCCL cannot reduce ", dtype_name(t),
           " tensors (no 16-bit integer type); widen to int32 first");
  return ncclInt8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

// Data movement needs no arithmetic: every dtype moves as bytes.
size_t byte_count(const Tensor& t) { return t.nbytes(); }

}  // namespace

// ---- Work ------------------------------------------------------------------------------------

class NcclCommunicator::NcclWork final : public parallel::Work {
 public:
  NcclWork(NcclCommunicator& c, cudaEvent_t event, std::vector<Tensor> keep)
      : c_(c), event_(event), keep_(std::move(keep)) {}
  ~NcclWork() override {
    try {
      if (!waited_) wait();
    } catch (...) {
      // a destructor cannot report; the error resurfaces at the next call on the communicator
    }
    cudaEventDestroy(event_);
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    MT_CUDA_CHECK(cudaStreamWaitEvent(c_.compute_stream(), event_, 0));
    if (c_.blocking_wait_) c_.host_wait(event_, "wait");
  }

 private:
  NcclCommunicator& c_;
  cudaEvent_t event_;
  std::vector<Tensor> keep_;
  bool waited_ = false;
};

// ---- construction ------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : name_(std::move(name)), timeout_s_(parallel::resolve_comm_timeout_s(timeout_s)) {
  init(comm);
}

NcclCommunicator::NcclCommunicator(const parallel::MpiCommunicator& group)
    : name_(group.name()), timeout_s_(group.timeout_s()) {
  init(group.comm());
}

void NcclCommunicator::init(MPI_Comm comm) {
  parallel::check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  parallel::check_mpi(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  parallel::check_mpi(MPI_Comm_group(comm, &group), "MPI_Comm_group");
  parallel::check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
  std::vector<int> ranks(size_);
  for (int r = 0; r < size_; ++r) ranks[r] = r;
  world_ranks_.resize(size_);
  parallel::check_mpi(
      MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_ranks_.data()),
      "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);

  MT_CUDA_CHECK(cudaGetDevice(&device_));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank_ == 0) MT_NCCL_CHECK(ncclGetUniqueId(&id));
  parallel::check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm),
                      "MPI_Bcast of the NCCL unique id");
  ncclComm_t c = nullptr;
  const ncclResult_t status = ncclCommInitRank(&c, size_, id, rank_);
  MT_CHECK(status == ncclSuccess, "ncclCommInitRank for group ", name_, " (rank ", rank_, " of ",
           size_, ", CUDA device ", device_, ") failed: ", ncclGetErrorString(status), ": ",
           ncclGetLastError(nullptr),
           " (each rank needs its own GPU: select it with select_device_for_local_rank)");
  comm_ = c;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  MT_CUDA_CHECK(cudaMalloc(&barrier_buffer_, sizeof(float)));
  MT_CUDA_CHECK(cudaMemset(barrier_buffer_, 0, sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_stream_) cudaStreamSynchronize(comm_stream_);
  if (comm_) ncclCommDestroy(comm_);
  if (barrier_buffer_) cudaFree(barrier_buffer_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
}

cudaStream_t NcclCommunicator::compute_stream() const {
  return fixed_compute_stream_ ? compute_stream_ : current_stream();
}

int NcclCommunicator::world_rank_of(int group_rank) const {
  MT_CHECK(group_rank >= 0 && group_rank < size_, "group ", name_, " has no rank ", group_rank);
  return world_ranks_[group_rank];
}

// ---- plumbing ---------------------------------------------------------------------------------

void NcclCommunicator::check_tensor(const Tensor& t, const char* op) const {
  MT_CHECK(t.device() == Device::CUDA, op, " on group ", name_,
           ": the NCCL communicator needs CUDA tensors, got a ", device_name(t.device()),
           " tensor (use the MPI communicator for CPU tensors)");
  MT_CHECK(t.defined(), op, " on group ", name_, ": undefined tensor");
}

void NcclCommunicator::begin() {
  cudaEvent_t ready = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(ready, compute_stream()));
  MT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready, 0));
  MT_CUDA_CHECK(cudaEventDestroy(ready));  // the wait is queued; destroying is safe
}

std::unique_ptr<parallel::Work> NcclCommunicator::finish(std::vector<Tensor> keep) {
  cudaEvent_t done = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(done, comm_stream_));
  return std::make_unique<NcclWork>(*this, done, std::move(keep));
}

void NcclCommunicator::complete_blocking() {
  finish({})->wait();  // compute stream waits (and the host too under blocking_wait)
}

void NcclCommunicator::check_async_error() {
  ncclResult_t async = ncclSuccess;
  MT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    const char* last = ncclGetLastError(comm_);
    ncclCommAbort(comm_);
    comm_ = nullptr;
    MT_CHECK(false, "NCCL communicator of group ", name_, " (rank ", rank_,
             ") failed asynchronously: ", ncclGetErrorString(async), ": ", last ? last : "");
  }
}

void NcclCommunicator::timed_out(const char* op, double waited_s) const {
  std::fprintf(stderr, "rank %d: collective %s on group %s timed out after %.1f s (NCCL)\n",
               world_ranks_.empty() ? rank_ : world_ranks_[rank_], op, name_.c_str(), waited_s);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

void NcclCommunicator::host_wait(cudaEvent_t event, const char* op) {
  const auto start = Clock::now();
  int polls = 0;
  for (;;) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) MT_CUDA_CHECK(status);
    MT_CHECK(comm_ != nullptr, op, " on group ", name_, ": communicator was aborted");
    check_async_error();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s_ > 0 && waited > timeout_s_) timed_out(op, waited);
    if (++polls < 1000)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::synchronize() {
  cudaEvent_t done = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(done, comm_stream_));
  try {
    host_wait(done, "synchronize");
  } catch (...) {
    cudaEventDestroy(done);
    throw;
  }
  MT_CUDA_CHECK(cudaEventDestroy(done));
}

// ---- collectives --------------------------------------------------------------------------------

std::unique_ptr<parallel::Work> NcclCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  const ncclDataType_t type = reduce_type(t.dtype(), op, name_, "all_reduce");
  MT_CHECK(comm_ != nullptr, "all_reduce on group ", name_, ": communicator was aborted");
  begin();
  if (t.numel() > 0)
    MT_NCCL_CHECK(
        ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), type, nccl_op(op), comm_, comm_stream_));
  return finish({t});
}

void NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }

std::unique_ptr<parallel::Work> NcclCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  check_tensor(in, "all_gather");
  check_tensor(out, "all_gather");
  MT_CHECK(in.dtype() == out.dtype(), "all_gather on group ", name_, ": input ",
           dtype_name(in.dtype()), " but output ", dtype_name(out.dtype()));
  MT_CHECK(out.numel() == in.numel() * size_, "all_gather on group ", name_, ": output holds ",
           out.numel(), " elements, expected ", size_, " x ", in.numel());
  MT_CHECK(comm_ != nullptr, "all_gather on group ", name_, ": communicator was aborted");
  begin();
  // NCCL's in-place form is exactly the interface's: in == out's chunk rank().
  if (in.numel() > 0)
    MT_NCCL_CHECK(
        ncclAllGather(in.raw(), out.raw(), byte_count(in), ncclUint8, comm_, comm_stream_));
  return finish({in, out});
}

void NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  all_gather_async(in, out)->wait();
}

std::unique_ptr<parallel::Work> NcclCommunicator::reduce_scatter_async(const Tensor& in,
                                                                       Tensor& out, ReduceOp op) {
  check_tensor(in, "reduce_scatter");
  check_tensor(out, "reduce_scatter");
  MT_CHECK(in.dtype() == out.dtype(), "reduce_scatter on group ", name_, ": input ",
           dtype_name(in.dtype()), " but output ", dtype_name(out.dtype()));
  MT_CHECK(in.numel() == out.numel() * size_, "reduce_scatter on group ", name_, ": input holds ",
           in.numel(), " elements, expected ", size_, " x ", out.numel());
  const ncclDataType_t type = reduce_type(in.dtype(), op, name_, "reduce_scatter");
  MT_CHECK(comm_ != nullptr, "reduce_scatter on group ", name_, ": communicator was aborted");
  begin();
  if (out.numel() > 0)
    MT_NCCL_CHECK(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), type, nccl_op(op),
                                    comm_, comm_stream_));
  return finish({in, out});
}

void NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  check_tensor(t, "broadcast");
  MT_CHECK(root >= 0 && root < size_, "broadcast on group ", name_, ": root ", root,
           " outside [0, ", size_, ")");
  MT_CHECK(comm_ != nullptr, "broadcast on group ", name_, ": communicator was aborted");
  begin();
  if (t.numel() > 0)
    MT_NCCL_CHECK(
        ncclBroadcast(t.raw(), t.raw(), byte_count(t), ncclUint8, root, comm_, comm_stream_));
  complete_blocking();
}

void NcclCommunicator::barrier() {
  MT_CHECK(comm_ != nullptr, "barrier on group ", name_, ": communicator was aborted");
  begin();
  MT_NCCL_CHECK(ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_,
                              comm_stream_));
  synchronize();
}

void NcclCommunicator::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                  Tensor& out, const std::vector<int64_t>& recv_counts) {
  check_tensor(in, "all_to_all");
  check_tensor(out, "all_to_all");
  MT_CHECK(in.dtype() == out.dtype(), "all_to_all on group ", name_, ": input ",
           dtype_name(in.dtype()), " but output ", dtype_name(out.dtype()));
  MT_CHECK(int(send_counts.size()) == size_ && int(recv_counts.size()) == size_,
           "all_to_all on group ", name_, ": need ", size_, " send and receive counts, got ",
           send_counts.size(), " and ", recv_counts.size());
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    MT_CHECK(send_counts[r] >= 0 && recv_counts[r] >= 0, "all_to_all on group ", name_,
             ": negative count for rank ", r);
    send_total += send_counts[r];
    recv_total += recv_counts[r];
  }
  MT_CHECK(send_total == in.numel() && recv_total == out.numel(), "all_to_all on group ", name_,
           ": counts sum to ", send_total, " sent / ", recv_total, " received but buffers hold ",
           in.numel(), " / ", out.numel());
  MT_CHECK(comm_ != nullptr, "all_to_all on group ", name_, ": communicator was aborted");
  const size_t esize = dtype_size(in.dtype());
  const char* src = static_cast<const char*>(in.raw());
  char* dst = static_cast<char*>(out.raw());
  begin();
  MT_NCCL_CHECK(ncclGroupStart());
  int64_t send_off = 0, recv_off = 0;
  for (int r = 0; r < size_; ++r) {
    if (send_counts[r] > 0)
      MT_NCCL_CHECK(ncclSend(src + send_off * esize, size_t(send_counts[r]) * esize, ncclUint8, r,
                             comm_, comm_stream_));
    if (recv_counts[r] > 0)
      MT_NCCL_CHECK(ncclRecv(dst + recv_off * esize, size_t(recv_counts[r]) * esize, ncclUint8, r,
                             comm_, comm_stream_));
    send_off += send_counts[r];
    recv_off += recv_counts[r];
  }
  MT_NCCL_CHECK(ncclGroupEnd());
  complete_blocking();
}

std::unique_ptr<parallel::Work> NcclCommunicator::batch_isend_irecv(
    std::vector<parallel::P2POp> ops) {
  for (const parallel::P2POp& op : ops) {
    check_tensor(op.buffer, op.kind == parallel::P2POp::Send ? "send" : "recv");
    MT_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "batch_isend_irecv on group ",
             name_, ": bad peer ", op.peer, " (rank ", rank_, " of ", size_, ")");
  }
  MT_CHECK(comm_ != nullptr, "batch_isend_irecv on group ", name_, ": communicator was aborted");
  begin();
  std::vector<Tensor> keep;
  keep.reserve(ops.size());
  bool any = false;
  for (const parallel::P2POp& op : ops) any = any || op.buffer.numel() > 0;
  if (any) {
    MT_NCCL_CHECK(ncclGroupStart());
    for (parallel::P2POp& op : ops) {
      if (op.buffer.numel() == 0) continue;
      if (op.kind == parallel::P2POp::Send)
        MT_NCCL_CHECK(ncclSend(op.buffer.raw(), byte_count(op.buffer), ncclUint8, op.peer, comm_,
                               comm_stream_));
      else
        MT_NCCL_CHECK(ncclRecv(op.buffer.raw(), byte_count(op.buffer), ncclUint8, op.peer, comm_,
                               comm_stream_));
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }
  for (parallel::P2POp& op : ops) keep.push_back(std::move(op.buffer));
  return finish(std::move(keep));
}

}  // namespace megatron::cuda
