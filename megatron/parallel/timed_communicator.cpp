#include "megatron/parallel/timed_communicator.h"

#include <chrono>
#include <utility>

namespace megatron::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// Adds the scope's duration to a counter.
class Timed {
 public:
  explicit Timed(double& seconds) : seconds_(seconds), start_(Clock::now()) {}
  ~Timed() { seconds_ += std::chrono::duration<double>(Clock::now() - start_).count(); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& seconds_;
  Clock::time_point start_;
};

class TimedWork final : public Work {
 public:
  TimedWork(std::unique_ptr<Work> inner, double& seconds)
      : inner_(std::move(inner)), seconds_(seconds) {}
  ~TimedWork() override {
    if (inner_) {
      Timed t(seconds_);
      inner_.reset();  // (destroying a Work that was never waited waits for it)
    }
  }
  void wait() override {
    Timed t(seconds_);
    inner_->wait();
  }

 private:
  std::unique_ptr<Work> inner_;
  double& seconds_;
};

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(Communicator& inner, double& seconds) : inner_(inner), seconds_(seconds) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  int world_rank_of(int group_rank) const override { return inner_.world_rank_of(group_rank); }

  void all_reduce(Tensor& t, ReduceOp op) override {
    Timed timed(seconds_);
    inner_.all_reduce(t, op);
  }
  std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override {
    return timed_work([&] { return inner_.all_reduce_async(t, op); });
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    Timed timed(seconds_);
    inner_.all_gather(in, out);
  }
  std::unique_ptr<Work> all_gather_async(const Tensor& in, Tensor& out) override {
    return timed_work([&] { return inner_.all_gather_async(in, out); });
  }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    Timed timed(seconds_);
    inner_.reduce_scatter(in, out, op);
  }
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return timed_work([&] { return inner_.reduce_scatter_async(in, out, op); });
  }
  void broadcast(Tensor& t, int root) override {
    Timed timed(seconds_);
    inner_.broadcast(t, root);
  }
  void barrier() override {
    Timed timed(seconds_);
    inner_.barrier();
  }
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    Timed timed(seconds_);
    inner_.all_to_all(in, send_counts, out, recv_counts);
  }
  std::unique_ptr<Work> batch_isend_irecv(std::vector<P2POp> ops) override {
    return timed_work([&] { return inner_.batch_isend_irecv(std::move(ops)); });
  }

 private:
  template <typename Post>
  std::unique_ptr<Work> timed_work(Post post) {
    std::unique_ptr<Work> w;
    {
      Timed timed(seconds_);
      w = post();
    }
    if (!w) return w;
    return std::make_unique<TimedWork>(std::move(w), seconds_);
  }

  Communicator& inner_;
  double& seconds_;
};

}  // namespace

std::unique_ptr<Communicator> make_timed_communicator(Communicator& inner, double& seconds) {
  return std::make_unique<TimedCommunicator>(inner, seconds);
}

}  // namespace megatron::parallel
