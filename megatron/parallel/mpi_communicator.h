#pragma once
// Communicator over an MPI communicator, for CPU tensors (CUDA tensors belong to the NCCL
// communicator; passing one here is an error that says so).
//
// Every operation is started non-blocking (MPI_Iallreduce, MPI_Ialltoallv, MPI_Isend, ...);
// the blocking calls are "start, then wait". Waiting polls MPI_Testall under a watchdog: every
// warn_s seconds of waiting (parallel.comm_warn_s, default 60) the rank prints
//   rank R: waiting N s for <op> on group <name> (not done: world ranks ...; abort at T s)
// and when an operation has not completed after timeout_s seconds (parallel.comm_timeout_s,
// default 600) it prints
//   rank R: collective <op> on group <name> timed out after T s (peers: ...)
// to stderr and calls MPI_Abort(MPI_COMM_WORLD, 3), so a hung or lost peer ends the whole job
// in bounded time instead of hanging it. (MPI does not say which members of a collective have
// arrived: both lines name the group's other members, or a point-to-point wait's peers.) (A peer
// that dies outright is handled by mpirun/srun, which kill the job when a rank exits abnormally;
// tests/parallel/failure_probe.cpp checks both cases.) MPI errors are returned, not fatal
// (MPI_ERRORS_RETURN), and thrown as megatron::Error carrying MPI's error string.
//
// Threading: MpiRuntime asks for MPI_THREAD_SERIALIZED; call a communicator from one thread at
// a time. The communicator must outlive every Work it returned.
//
// Counts: all_reduce, broadcast and point-to-point messages longer than max_chunk_elements()
// (INT_MAX by default) are split into several MPI calls; all_gather, reduce_scatter and
// all_to_all reject per-rank counts/offsets beyond it with a clear error. Both ends of a
// point-to-point message must use the same chunk size. A receive checks that exactly its
// buffer's element count arrived (a size mismatch between sender and receiver is an error).
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/parallel/communicator.h"

namespace megatron::parallel {

inline constexpr double kDefaultCommTimeoutS = 600.0;
inline constexpr double kDefaultCommWarnS = 60.0;

// The watchdog timeout to use: MEGATRON_COMM_TIMEOUT_S when set (it overrides the configured
// value; a malformed value is an error naming the variable), else `configured`. <= 0 disables.
double resolve_comm_timeout_s(double configured = kDefaultCommTimeoutS);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (MPI_Comm_free on destruction) and sets MPI_ERRORS_RETURN on it.
  // timeout_s goes through resolve_comm_timeout_s.
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s = kDefaultCommTimeoutS);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // A duplicate of MPI_COMM_WORLD named "world". MPI must be initialised (see MpiRuntime).
  static std::unique_ptr<MpiCommunicator> world(double timeout_s = kDefaultCommTimeoutS);
  // Collective over this group (MPI_Comm_split): members passing the same color form a new
  // group, ordered by key (ties by rank here). color < 0 joins no group and returns nullptr.
  // The new communicator inherits this one's timeout and chunk size.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override;
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return timeout_s_; }
  // Seconds between "waiting" lines of one wait (<= 0: none); split() inherits it.
  double warn_seconds() const { return warn_s_; }
  void set_warn_seconds(double s) { warn_s_ = s; }
  // Largest element count passed to one MPI call (tests lower it to exercise chunking).
  int64_t max_chunk_elements() const { return max_chunk_; }
  void set_max_chunk_elements(int64_t n);
  // How long a wait busy-polls before it starts yielding the core (then sleeping, after 50 ms).
  // world() picks 2 ms when the node has a core per rank, else 0; split() inherits it.
  double spin_seconds() const { return spin_s_; }
  void set_spin_seconds(double s);

  void all_reduce(Tensor& t, ReduceOp op) override;
  std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<Work> all_gather_async(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override;
  std::unique_ptr<Work> batch_isend_irecv(std::vector<P2POp> ops) override;

  // Completes `requests` under the watchdog (see above); `peers` are group ranks named in the
  // timeout message (empty = every other member). Throws megatron::Error on MPI errors. The
  // completed requests' statuses land in *statuses when given.
  void wait_requests(std::vector<MPI_Request>& requests, std::string_view op,
                     const std::vector<int>& peers = {},
                     std::vector<MPI_Status>* statuses = nullptr) const;

 private:
  [[noreturn]] void timed_out(std::string_view op, double waited_s,
                              const std::vector<int>& peers) const;
  void still_waiting(std::string_view op, double waited_s, const std::vector<int>& peers) const;
  void not_running(std::string_view op, double gap_s) const;
  // A gap between two polls of a wait longer than this: the process itself was not running.
  static constexpr double kStallGapS = 2.0;
  // "1, 5, 9" (world ranks of `peers`, or of every other member when empty; cut after 32).
  std::string peer_list(const std::vector<int>& peers) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  double timeout_s_;
  double warn_s_ = kDefaultCommWarnS;
  int rank_ = 0, size_ = 1;
  int64_t max_chunk_;
  double spin_s_ = 0.0;
  std::vector<int> world_ranks_;  // group rank -> MPI_COMM_WORLD rank
};

// Throws megatron::Error "<what> failed: <MPI error string>" unless rc == MPI_SUCCESS.
void check_mpi(int rc, std::string_view what);

}  // namespace megatron::parallel
