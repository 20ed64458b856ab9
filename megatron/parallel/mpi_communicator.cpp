#include "megatron/parallel/mpi_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <sstream>
#include <thread>

#include "kernels/common/numeric.h"

namespace megatron::parallel {
namespace {

// The whole side of a gather or scatter (`side`: "output" / "input") holds `size` chunks of
// n elements, and a chunk fits one MPI count.
void check_chunks(const char* op, const char* side, const char* verb, const std::string& group,
                  int size, int64_t max_chunk, int64_t whole, int64_t n) {
  MT_CHECK(whole == n * size, op, " on group '", group, "' of ", size, ": ", side, " holds ", whole,
           " elements, need ", size, " x ", n);
  MT_CHECK(n <= max_chunk, op, " on group '", group, "': ", n,
           " elements per rank exceed the MPI count limit ", max_chunk, "; ", verb,
           " in several calls");
}

using Clock = std::chrono::steady_clock;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
    case DType::U16:
      return MPI_UINT16_T;  // moved as bits; reductions go through an fp32 copy (widened)
    case DType::I64:
      return MPI_INT64_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I16:
      return MPI_INT16_T;
    case DType::I8:
      return MPI_INT8_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  MT_CHECK(false, "invalid dtype code ", static_cast<int>(t));
  __builtin_unreachable();
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return concat("MPI error code ", rc);
  return std::string(buf, static_cast<size_t>(len));
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw()); }

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* a0 = bytes_of(a);
  const char* b0 = bytes_of(b);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

void divide_by(Tensor& t, int n) {
  if (t.numel() == 0 || n == 1) return;
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    const float d = static_cast<float>(n);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= d;
  } else {
    MT_CHECK(t.dtype() == DType::F64, "avg of ", dtype_name(t.dtype()));
    double* p = t.data<double>();
    const double d = static_cast<double>(n);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= d;
  }
}

bool is_16bit_float(DType t) { return t == DType::BF16 || t == DType::F16; }

// 16-bit floats are reduced as fp32 (MPI has no bf16/fp16 sum): widened here, reduced, and
// rounded back once (round to nearest even) when the operation completes.
Tensor widened(const Tensor& t) {
  Tensor w = Tensor::empty(t.shape(), DType::F32);
  const uint16_t* in = static_cast<const uint16_t*>(t.raw());
  float* out = w.data<float>();
  const bool bf16 = t.dtype() == DType::BF16;
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = bf16 ? math::bf16_bits_to_float(in[i]) : math::fp16_bits_to_float(in[i]);
  return w;
}

void narrow_into(const Tensor& wide, Tensor& t) {
  const float* in = wide.data<float>();
  uint16_t* out = static_cast<uint16_t*>(t.raw());
  const bool bf16 = t.dtype() == DType::BF16;
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = bf16 ? math::float_to_bf16_bits(in[i]) : math::float_to_fp16_bits(in[i]);
}

// An operation in flight: its requests plus what must stay alive until it completes (the
// tensors, whose owning storage is shared, and count arrays) and what runs after completion.
class MpiWork final : public Work {
 public:
  MpiWork(const MpiCommunicator& comm, std::string op) : comm_(&comm), op_(std::move(op)) {}
  ~MpiWork() override {
    if (done_ || mpi_finalized()) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s (while destroying an unwaited Work)\n", e.what());
    }
  }

  void wait() override {
    if (done_) return;
    done_ = true;
    std::vector<MPI_Status> statuses;
    comm_->wait_requests(requests, op_, peers, expected_counts.empty() ? nullptr : &statuses);
    for (size_t i = 0; i < expected_counts.size(); ++i) {
      const ExpectedCount& e = expected_counts[i];
      int got = 0;
      MPI_Get_count(&statuses[e.request], e.type, &got);
      MT_CHECK(got == e.count, op_, ": received ", got, " elements from rank ", e.peer, " (tag ",
               e.tag, ") into a buffer chunk of ", e.count, "; sender and receiver sizes differ");
    }
    if (finish) finish();
  }

  std::vector<MPI_Request> requests;
  std::vector<Tensor> keep_alive;
  std::vector<std::vector<int>> int_arrays;
  std::vector<int> peers;
  std::function<void()> finish;
  struct ExpectedCount {
    size_t request;
    MPI_Datatype type;
    int count, peer, tag;
  };
  std::vector<ExpectedCount> expected_counts;  // receives to verify on completion

 private:
  const MpiCommunicator* comm_;
  std::string op_;
  bool done_ = false;
};

// Makes `work` (an MpiWork reducing `wide`) round `wide` into `target` once it completes.
std::unique_ptr<Work> narrowing_into(std::unique_ptr<Work> work, Tensor wide, Tensor target) {
  auto& mpi_work = static_cast<MpiWork&>(*work);
  mpi_work.finish = [wide, target, prior = std::move(mpi_work.finish)]() mutable {
    if (prior) prior();
    narrow_into(wide, target);
  };
  return work;
}

}  // namespace

void check_mpi(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) throw Error(concat(what, " failed: ", mpi_error_string(rc)));
}

double resolve_comm_timeout_s(double configured) {
  const char* env = std::getenv("MEGATRON_COMM_TIMEOUT_S");
  if (env == nullptr || *env == '\0') return configured;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  MT_INPUT_CHECK(end != env && *end == '\0', "MEGATRON_COMM_TIMEOUT_S='", env,
                 "' is not a number of seconds");
  return v;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : comm_(comm),
      name_(std::move(name)),
      timeout_s_(resolve_comm_timeout_s(timeout_s)),
      max_chunk_(INT_MAX) {
  MT_CHECK(comm_ != MPI_COMM_NULL, "MpiCommunicator '", name_, "' given MPI_COMM_NULL");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  MPI_Group group, world_group;
  check_mpi(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group(world)");
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int i = 0; i < size_; ++i) ranks[static_cast<size_t>(i)] = i;
  world_ranks_.resize(ranks.size());
  check_mpi(MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_ranks_.data()),
            "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  MT_CHECK(initialized && !mpi_finalized(),
           "MpiCommunicator::world: MPI is not initialised (construct an MpiRuntime first)");
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup(MPI_COMM_WORLD)");
  auto world = std::make_unique<MpiCommunicator>(dup, "world", timeout_s);
  // Busy-poll only when this node has a core per rank (as Open MPI's own progress loop does;
  // oversubscribed ranks yield at once).
  MPI_Comm shared = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  int local = 1;
  MPI_Comm_size(shared, &local);
  MPI_Comm_free(&shared);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  world->set_spin_seconds(local <= cpus ? 2e-3 : 0.0);
  return world;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::string name) const {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out),
            concat("MPI_Comm_split of group '", name_, "' into '", name, "'"));
  if (out == MPI_COMM_NULL) return nullptr;
  auto child = std::make_unique<MpiCommunicator>(out, std::move(name), timeout_s_);
  child->spin_s_ = spin_s_;
  child->warn_s_ = warn_s_;
  child->max_chunk_ = max_chunk_;
  return child;
}

int MpiCommunicator::world_rank_of(int group_rank) const {
  MT_CHECK(group_rank >= 0 && group_rank < size_, "group rank ", group_rank, " outside group '",
           name_, "' of ", size_);
  return world_ranks_[static_cast<size_t>(group_rank)];
}

void MpiCommunicator::set_spin_seconds(double s) {
  MT_CHECK(s >= 0 && s <= 1, "spin time ", s, " s outside [0, 1]");
  spin_s_ = s;
}

void MpiCommunicator::set_max_chunk_elements(int64_t n) {
  MT_CHECK(n >= 1 && n <= INT_MAX, "max chunk elements ", n, " outside [1, INT_MAX]");
  max_chunk_ = n;
}

std::string MpiCommunicator::peer_list(const std::vector<int>& peers) const {
  std::vector<int> list = peers;
  if (list.empty())
    for (int r = 0; r < size_; ++r)
      if (r != rank_) list.push_back(r);
  std::ostringstream os;
  const size_t shown = std::min<size_t>(list.size(), 32);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << world_rank_of(list[i]);
  if (shown < list.size()) os << ", ... " << list.size() - shown << " more";
  if (list.empty()) os << "none";
  return os.str();
}

void MpiCommunicator::still_waiting(std::string_view op, double waited_s,
                                    const std::vector<int>& peers) const {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::ostringstream os;
  os << "rank " << world_rank << ": waiting " << std::fixed << std::setprecision(0) << waited_s
     << " s for " << op << " on group " << name_ << " (not done: world ranks " << peer_list(peers)
     << "; abort at " << timeout_s_ << " s, parallel.comm_timeout_s)\n";
  const std::string msg = os.str();
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
}

void MpiCommunicator::not_running(std::string_view op, double gap_s) const {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::ostringstream os;
  os << "rank " << world_rank << ": this process did not run for " << std::fixed
     << std::setprecision(1) << gap_s << " s while waiting for " << op << " on group " << name_
     << " (stopped or starved); that time is not counted against parallel.comm_timeout_s\n";
  const std::string msg = os.str();
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
}

void MpiCommunicator::timed_out(std::string_view op, double waited_s,
                                const std::vector<int>& peers) const {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::ostringstream os;
  os << "rank " << world_rank << ": collective " << op << " on group " << name_
     << " timed out after " << timeout_s_ << " s (peers: " << peer_list(peers)
     << ")\n  (peers are world ranks of the group's other members; waited " << waited_s
     << " s; the limit is parallel.comm_timeout_s, or MEGATRON_COMM_TIMEOUT_S when set)\n";
  const std::string msg = os.str();
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // MPI_Abort does not return; keep [[noreturn]] honest regardless
}

void MpiCommunicator::wait_requests(std::vector<MPI_Request>& requests, std::string_view op,
                                    const std::vector<int>& peers,
                                    std::vector<MPI_Status>* statuses_out) const {
  std::vector<MPI_Status> local;
  std::vector<MPI_Status>& statuses = statuses_out ? *statuses_out : local;
  statuses.assign(requests.size(), MPI_Status{});
  if (requests.empty()) return;
  const auto start = Clock::now();
  auto last_poll = start;
  double next_warning = warn_s_, stalled = 0.0;
  for (;;) {
    int flag = 0;
    const int rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, statuses.data());
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : statuses)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING)
          check_mpi(s.MPI_ERROR, concat(op, " on group '", name_, "'"));
    }
    check_mpi(rc, concat(op, " on group '", name_, "'"));
    if (flag) return;
    // Polls are at most a few milliseconds apart: a longer gap means this process itself was
    // not running (SIGSTOP, a debugger, a starved VM). That time is not the peers' fault and
    // does not count against the timeout (a resumed rank would otherwise blame its peers).
    const auto now = Clock::now();
    const double gap = std::chrono::duration<double>(now - last_poll).count();
    last_poll = now;
    if (gap > kStallGapS) {
      stalled += gap;
      not_running(op, gap);
    }
    const double waited = std::chrono::duration<double>(now - start).count() - stalled;
    if (timeout_s_ > 0 && waited > timeout_s_) timed_out(op, waited, peers);
    if (warn_s_ > 0 && waited > next_warning) {
      still_waiting(op, waited, peers);
      next_warning += warn_s_;
    }
    // Poll eagerly at first (MPI progresses non-blocking collectives only inside MPI calls):
    // busy while cores are to spare, then yielding the core to co-located ranks; back off once
    // the wait is clearly long.
    if (waited < spin_s_)
      continue;
    else if (waited < 0.05)
      sched_yield();
    else if (waited < 1.0)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- collectives -----------------------------------------------------------------------

namespace {

void check_cpu(const Tensor& t, std::string_view op, const std::string& group) {
  MT_CHECK(t.device() == Device::CPU, op, " on group '", group, "': tensor lives on ",
           device_name(t.device()),
           "; the MPI communicator moves CPU tensors only (CUDA tensors need the NCCL "
           "communicator)");
  MT_CHECK(t.defined(), op, " on group '", group, "': undefined tensor");
}

}  // namespace

std::unique_ptr<Work> MpiCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  check_cpu(t, "all_reduce", name_);
  check_reduce_dtype(t.dtype(), op, concat("all_reduce on group '", name_, "'"));
  if (is_16bit_float(t.dtype())) {
    Tensor wide = widened(t);
    return narrowing_into(all_reduce_async(wide, op), wide, t);
  }
  auto work = std::make_unique<MpiWork>(*this, "all_reduce");
  work->keep_alive.push_back(t);
  const MPI_Datatype type = mpi_type(t.dtype());
  const size_t esize = dtype_size(t.dtype());
  const int64_t n = t.numel();
  for (int64_t off = 0; off < n || (n == 0 && off == 0); off += max_chunk_) {
    const int count = static_cast<int>(std::min<int64_t>(max_chunk_, n - off));
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, bytes_of(t) + static_cast<size_t>(off) * esize, count,
                             type, mpi_op(op), comm_, &req),
              concat("MPI_Iallreduce on group '", name_, "'"));
    work->requests.push_back(req);
    if (n == 0) break;
  }
  if (op == ReduceOp::Avg) {
    Tensor target = t;
    const int size = size_;
    work->finish = [target, size]() mutable { divide_by(target, size); };
  }
  return work;
}

void MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }

std::unique_ptr<Work> MpiCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  check_cpu(in, "all_gather", name_);
  check_cpu(out, "all_gather", name_);
  MT_CHECK(in.dtype() == out.dtype(), "all_gather on group '", name_, "': input ",
           dtype_name(in.dtype()), " vs output ", dtype_name(out.dtype()));
  const int64_t n = in.numel();
  check_chunks("all_gather", "output", "gather", name_, size_, max_chunk_, out.numel(), n);
  const MPI_Datatype type = mpi_type(in.dtype());
  const size_t chunk_bytes = static_cast<size_t>(n) * dtype_size(in.dtype());
  const bool in_place = n > 0 && bytes_of(in) == bytes_of(out) + rank_ * chunk_bytes;
  MT_CHECK(in_place || !overlap(in, out), "all_gather on group '", name_,
           "': input overlaps the output other than as its own chunk ", rank_);
  auto work = std::make_unique<MpiWork>(*this, "all_gather");
  work->keep_alive = {in, out};
  MPI_Request req;
  check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : bytes_of(in), static_cast<int>(n), type,
                           bytes_of(out), static_cast<int>(n), type, comm_, &req),
            concat("MPI_Iallgather on group '", name_, "'"));
  work->requests.push_back(req);
  return work;
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  all_gather_async(in, out)->wait();
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out,
                                                            ReduceOp op) {
  check_cpu(in, "reduce_scatter", name_);
  check_cpu(out, "reduce_scatter", name_);
  MT_CHECK(in.dtype() == out.dtype(), "reduce_scatter on group '", name_, "': input ",
           dtype_name(in.dtype()), " vs output ", dtype_name(out.dtype()));
  check_reduce_dtype(in.dtype(), op, concat("reduce_scatter on group '", name_, "'"));
  if (is_16bit_float(in.dtype())) {
    Tensor wide_in = widened(in);
    Tensor wide_out = Tensor::empty(out.shape(), DType::F32);
    return narrowing_into(reduce_scatter_async(wide_in, wide_out, op), wide_out, out);
  }
  const int64_t n = out.numel();
  check_chunks("reduce_scatter", "input", "reduce-scatter", name_, size_, max_chunk_, in.numel(),
               n);
  auto work = std::make_unique<MpiWork>(*this, "reduce_scatter");
  work->keep_alive = {in, out};
  // MPI forbids aliasing input and output; an overlapping output (e.g. this rank's chunk of the
  // input itself) receives into scratch and is copied out on completion.
  Tensor target = out;
  Tensor dest = overlap(in, out) ? Tensor::empty(Shape{n}, out.dtype()) : out;
  work->keep_alive.push_back(dest);
  MPI_Request req;
  check_mpi(MPI_Ireduce_scatter_block(bytes_of(in), bytes_of(dest), static_cast<int>(n),
                                      mpi_type(in.dtype()), mpi_op(op), comm_, &req),
            concat("MPI_Ireduce_scatter_block on group '", name_, "'"));
  work->requests.push_back(req);
  const bool copy_back = dest.raw() != out.raw();
  const bool avg = op == ReduceOp::Avg;
  const int size = size_;
  if (copy_back || avg) {
    work->finish = [target, dest, copy_back, avg, size]() mutable {
      if (copy_back) target.copy_from(dest);
      if (avg) divide_by(target, size);
    };
  }
  return work;
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  check_cpu(t, "broadcast", name_);
  MT_CHECK(root >= 0 && root < size_, "broadcast on group '", name_, "': root ", root,
           " outside the group of ", size_);
  MpiWork work(*this, "broadcast");
  const size_t esize = dtype_size(t.dtype());
  const int64_t n = t.numel();
  for (int64_t off = 0; off < n || (n == 0 && off == 0); off += max_chunk_) {
    const int count = static_cast<int>(std::min<int64_t>(max_chunk_, n - off));
    MPI_Request req;
    check_mpi(MPI_Ibcast(bytes_of(t) + static_cast<size_t>(off) * esize, count, mpi_type(t.dtype()),
                         root, comm_, &req),
              concat("MPI_Ibcast on group '", name_, "'"));
    work.requests.push_back(req);
    if (n == 0) break;
  }
  work.wait();
}

void MpiCommunicator::barrier() {
  MpiWork work(*this, "barrier");
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm_, &req), concat("MPI_Ibarrier on group '", name_, "'"));
  work.requests.push_back(req);
  work.wait();
}

void MpiCommunicator::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                 Tensor& out, const std::vector<int64_t>& recv_counts) {
  check_cpu(in, "all_to_all", name_);
  check_cpu(out, "all_to_all", name_);
  MT_CHECK(in.dtype() == out.dtype(), "all_to_all on group '", name_, "': input ",
           dtype_name(in.dtype()), " vs output ", dtype_name(out.dtype()));
  MT_CHECK(static_cast<int>(send_counts.size()) == size_ &&
               static_cast<int>(recv_counts.size()) == size_,
           "all_to_all on group '", name_, "' of ", size_, ": got ", send_counts.size(),
           " send and ", recv_counts.size(), " receive counts");
  MT_CHECK(!overlap(in, out), "all_to_all on group '", name_,
           "': input and output buffers overlap");
  MpiWork work(*this, "all_to_all");
  auto to_ints = [&](const std::vector<int64_t>& counts, int64_t total, const char* what) {
    std::vector<int> c(counts.size()), d(counts.size());
    int64_t off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      MT_CHECK(counts[r] >= 0, "all_to_all on group '", name_, "': negative ", what, " count ",
               counts[r], " for rank ", r);
      MT_CHECK(off + counts[r] <= max_chunk_, "all_to_all on group '", name_, "': ", what,
               " offsets reach ", off + counts[r], " elements, beyond the MPI count limit ",
               max_chunk_, "; exchange in several calls");
      c[r] = static_cast<int>(counts[r]);
      d[r] = static_cast<int>(off);
      off += counts[r];
    }
    MT_CHECK(off == total, "all_to_all on group '", name_, "': ", what, " counts sum to ", off,
             " but the buffer holds ", total, " elements");
    work.int_arrays.push_back(std::move(c));
    work.int_arrays.push_back(std::move(d));
  };
  to_ints(send_counts, in.numel(), "send");
  to_ints(recv_counts, out.numel(), "receive");
  const MPI_Datatype type = mpi_type(in.dtype());
  MPI_Request req;
  check_mpi(MPI_Ialltoallv(bytes_of(in), work.int_arrays[0].data(), work.int_arrays[1].data(), type,
                           bytes_of(out), work.int_arrays[2].data(), work.int_arrays[3].data(),
                           type, comm_, &req),
            concat("MPI_Ialltoallv on group '", name_, "'"));
  work.requests.push_back(req);
  work.wait();
}

std::unique_ptr<Work> MpiCommunicator::batch_isend_irecv(std::vector<P2POp> ops) {
  auto work = std::make_unique<MpiWork>(*this, "batch_isend_irecv");
  for (const P2POp& p : ops) {
    const char* kind = p.kind == P2POp::Send ? "send" : "recv";
    check_cpu(p.buffer, concat("batch_isend_irecv ", kind), name_);
    MT_CHECK(p.peer >= 0 && p.peer < size_, "batch_isend_irecv on group '", name_, "': ", kind,
             " peer ", p.peer, " outside the group of ", size_);
    MT_CHECK(p.tag >= 0 && p.tag <= 32767, "batch_isend_irecv on group '", name_, "': ", kind,
             " tag ", p.tag, " outside [0, 32767]");
    bool known = false;
    for (int q : work->peers) known = known || q == p.peer;
    if (!known) work->peers.push_back(p.peer);
  }
  for (const P2POp& p : ops) {
    work->keep_alive.push_back(p.buffer);
    const MPI_Datatype type = mpi_type(p.buffer.dtype());
    const size_t esize = dtype_size(p.buffer.dtype());
    const int64_t n = p.buffer.numel();
    // Long messages go as several (same peer, same tag: MPI keeps them in order).
    for (int64_t off = 0; off < n || (n == 0 && off == 0); off += max_chunk_) {
      const int count = static_cast<int>(std::min<int64_t>(max_chunk_, n - off));
      char* ptr = bytes_of(p.buffer) + static_cast<size_t>(off) * esize;
      MPI_Request req;
      if (p.kind == P2POp::Send)
        check_mpi(MPI_Isend(ptr, count, type, p.peer, p.tag, comm_, &req),
                  concat("MPI_Isend to rank ", p.peer, " of group '", name_, "'"));
      else
        check_mpi(MPI_Irecv(ptr, count, type, p.peer, p.tag, comm_, &req),
                  concat("MPI_Irecv from rank ", p.peer, " of group '", name_, "'"));
      if (p.kind == P2POp::Recv)
        work->expected_counts.push_back({work->requests.size(), type, count, p.peer, p.tag});
      work->requests.push_back(req);
      if (n == 0) break;
    }
  }
  return work;
}

}  // namespace megatron::parallel
