#include "megatron/parallel/communicator.h"

namespace megatron::parallel {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
};

class SingleProcessCommunicator final : public Communicator {
 public:
  SingleProcessCommunicator(std::string name, int world_rank)
      : name_(std::move(name)), world_rank_(world_rank) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override {
    MT_CHECK(group_rank == 0, "group rank ", group_rank, " outside the group of one '", name_, "'");
    return world_rank_;
  }

  void all_reduce(Tensor& t, ReduceOp op) override { check_op(t.dtype(), op, "all_reduce"); }
  std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override {
    all_reduce(t, op);
    return std::make_unique<DoneWork>();
  }
  void all_gather(const Tensor& in, Tensor& out) override { copy(in, out, "all_gather"); }
  std::unique_ptr<Work> all_gather_async(const Tensor& in, Tensor& out) override {
    all_gather(in, out);
    return std::make_unique<DoneWork>();
  }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_op(in.dtype(), op, "reduce_scatter");
    copy(in, out, "reduce_scatter");
  }
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    reduce_scatter(in, out, op);
    return std::make_unique<DoneWork>();
  }
  void broadcast(Tensor&, int root) override {
    MT_CHECK(root == 0, "broadcast root ", root, " outside the group of one '", name_, "'");
  }
  void barrier() override {}
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    MT_CHECK(send_counts.size() == 1 && recv_counts.size() == 1, "all_to_all on group '", name_,
             "' of one: need one send and one receive count, got ", send_counts.size(), " and ",
             recv_counts.size());
    MT_CHECK(send_counts[0] == in.numel() && recv_counts[0] == out.numel(), "all_to_all on group '",
             name_, "' of one: counts ", send_counts[0], "/", recv_counts[0], " vs buffers of ",
             in.numel(), "/", out.numel(), " elements");
    copy(in, out, "all_to_all");
  }
  std::unique_ptr<Work> batch_isend_irecv(std::vector<P2POp> ops) override {
    MT_CHECK(ops.empty(), "batch_isend_irecv on group '", name_, "': no peers in a group of one (",
             ops.size(), " ops, first with peer ", ops.empty() ? 0 : ops.front().peer, ")");
    return std::make_unique<DoneWork>();
  }

 private:
  void check_op(DType dtype, ReduceOp op, const char* what) const {
    MT_CHECK(op != ReduceOp::Avg || dtype_is_float(dtype), what, " on group '", name_,
             "': avg-reduction needs a floating dtype, got ", dtype_name(dtype));
  }
  void copy(const Tensor& in, Tensor& out, const char* op) const {
    MT_CHECK(in.dtype() == out.dtype(), op, " on group '", name_, "': input ",
             dtype_name(in.dtype()), " vs output ", dtype_name(out.dtype()));
    MT_CHECK(in.numel() == out.numel(), op, ": input ", in.shape().str(), " vs output ",
             out.shape().str(), " in the group of one '", name_, "'");
    if (in.raw() != out.raw()) out.copy_from(in);
  }

  std::string name_;
  int world_rank_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator(std::string name, int world_rank) {
  return std::make_unique<SingleProcessCommunicator>(std::move(name), world_rank);
}

}  // namespace megatron::parallel
