#include "megatron/pipeline/dualpipe_v.h"

#include <deque>
#include <utility>

#include "megatron/core/error.h"

namespace megatron::pipeline {
namespace {

// One stage's compute order as its phases append to it: per chunk the next micro-batch to run
// forward and backward, and the B's whose W is pending, oldest first.
class StageOrder {
 public:
  void forward(int chunk) { order_.push_back({ActionKind::Forward, next_f_[chunk]++, chunk, -1}); }
  // A whole backward, or (split) only its input gradient, its W queued.
  void backward(int chunk, bool split) {
    const int mb = next_b_[chunk]++;
    order_.push_back({ActionKind::Backward, mb, chunk, -1});
    if (split) pending_.push_back({mb, chunk});
  }
  void weight() {
    MT_CHECK(!pending_.empty(), "dualpipe_v: a W with no B pending");
    order_.push_back({ActionKind::WeightGrad, pending_.front().first, pending_.front().second, -1});
    pending_.pop_front();
  }
  ComputeOrder take() {
    MT_CHECK(pending_.empty(), "dualpipe_v: ", pending_.size(), " W's never ran");
    return std::move(order_);
  }

 private:
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<std::pair<int, int>> pending_;
  ComputeOrder order_;
};

ComputeOrder stage_order(int pp, int s, int m) {
  StageOrder o;
  const int down = pp - s - 1;  // stages after this one
  for (int i = 0; i < 2 * down; ++i) o.forward(0);
  for (int i = 0; i <= s; ++i) o.forward(0), o.forward(1);
  for (int i = 0; i < down; ++i) o.backward(1, true), o.weight(), o.forward(1);
  for (int i = 0; i < m - 2 * pp + s + 1; ++i) {
    o.forward(0), o.backward(1, false);
    o.forward(1), o.backward(0, false);
  }
  for (int i = 0; i < down; ++i) o.backward(1, false), o.forward(1), o.backward(0, false);
  // The second half of these B's leave their W's for the tail.
  bool split = false;
  for (int i = 0; i <= s; ++i) {
    if (i == (s + 1) / 2 && s % 2 == 1) split = true;
    o.backward(1, split);
    if (i == (s + 1) / 2 && s % 2 == 0) split = true;
    o.backward(0, split);
  }
  for (int i = 0; i < down; ++i) o.weight(), o.backward(0, true);
  for (int i = 0; i <= s; ++i) o.weight();
  return o.take();
}

}  // namespace

std::vector<ComputeOrder> dualpipe_v_order(int pp, int microbatches) {
  MT_INPUT_CHECK(pp >= 2, "dualpipe_v: needs a pipeline-parallel size >= 2, got ", pp);
  MT_INPUT_CHECK(microbatches >= dualpipe_v_min_microbatches(pp),
                 "dualpipe_v: needs at least 2 * pp = ", dualpipe_v_min_microbatches(pp),
                 " micro-batches with pp ", pp, ", got ", microbatches);
  std::vector<ComputeOrder> orders;
  for (int s = 0; s < pp; ++s) orders.push_back(stage_order(pp, s, microbatches));
  return orders;
}

Schedule dualpipe_v(int pp, int microbatches) {
  return buffered_pipeline(ScheduleKind::DualPipeV, pp, microbatches, 2, Placement::V,
                           dualpipe_v_order(pp, microbatches));
}

}  // namespace megatron::pipeline
