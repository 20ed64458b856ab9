#include "megatron/pipeline/zero_bubble.h"

#include <cmath>
#include <deque>
#include <limits>

#include "megatron/core/error.h"

namespace megatron::pipeline {

void PassCosts::validate() const {
  for (auto [value, name] : {std::pair{forward, "forward"}, std::pair{backward_input, "backward"},
                             std::pair{weight, "weight-gradient"}})
    MT_INPUT_CHECK(std::isfinite(value) && value > 0, "zero-bubble schedule: the ", name,
                   " pass time must be finite and > 0, got ", value);
}

namespace {

constexpr double kUnknown = -1;

// What a stage would do next, and when.
struct Choice {
  ActionKind kind = ActionKind::Forward;
  int microbatch = -1;
  double start = std::numeric_limits<double>::infinity();
  int chunk = 0;
  bool valid() const { return microbatch >= 0; }
};

// The pipeline while a greedy plays it out: per stage its chunks' next passes, the activations
// it holds (forwards whose W has not run) and its compute order; per (virtual stage,
// micro-batch) when its forward and B ended. A pass through a chunk takes 1/vpp of a stage's.
// The schedules differ only in how a stage chooses its next pass (their choose()).
class PipelinePlay {
 public:
  PipelinePlay(int pp, int m, int vpp, Placement placement, const PassCosts& costs, int limit)
      : pp_(pp),
        m_(m),
        vpp_(vpp),
        placement_(placement),
        costs_(costs),
        stages_(static_cast<size_t>(pp)),
        f_end_(static_cast<size_t>(pp * vpp * m), kUnknown),
        b_end_(static_cast<size_t>(pp * vpp * m), kUnknown) {
    for (auto& st : stages_) st.limit = limit;
  }

  void commit(int s, const Choice& c) {
    Stage& st = stage(s);
    const int v = vstage(s, c.chunk);
    double end = c.start;
    switch (c.kind) {
      case ActionKind::Forward:
        end += costs_.forward / vpp_;
        f_end(v, c.microbatch) = end;
        ++st.next_forward[c.chunk];
        ++st.in_flight;
        break;
      case ActionKind::Backward:
        end += costs_.backward_input / vpp_;
        b_end(v, c.microbatch) = end;
        ++st.next_backward[c.chunk];
        st.pending_weights.push_back({c.microbatch, c.chunk});
        break;
      default:
        end += costs_.weight / vpp_;
        st.pending_weights.pop_front();
        --st.in_flight;
        break;
    }
    st.free_at = end;
    if (c.kind != ActionKind::WeightGrad) st.last_was_forward = c.kind == ActionKind::Forward;
    st.order.push_back({c.kind, c.microbatch, c.chunk, -1});
  }

  std::vector<ComputeOrder> orders() {
    std::vector<ComputeOrder> out;
    for (auto& st : stages_) out.push_back(std::move(st.order));
    return out;
  }

 protected:
  struct Stage {
    double free_at = 0;
    int next_forward[2] = {0, 0}, next_backward[2] = {0, 0};  // per chunk
    int in_flight = 0, limit = 0;
    bool last_was_forward = false;                    // of its forwards and B's
    std::deque<std::pair<int, int>> pending_weights;  // (micro-batch, chunk) in B order
    ComputeOrder order;
  };

  Stage& stage(int s) { return stages_[static_cast<size_t>(s)]; }
  int vstage(int s, int chunk) const { return virtual_stage(pp_, s, chunk, placement_); }
  double& f_end(int v, int mb) { return f_end_[static_cast<size_t>(v * m_ + mb)]; }
  double& b_end(int v, int mb) { return b_end_[static_cast<size_t>(v * m_ + mb)]; }

  // When stage s's next B on `chunk` could start (its forward ran and its output gradient is
  // there), or kUnknown.
  double backward_ready(int s, int chunk) {
    const Stage& st = stage(s);
    const int mb = st.next_backward[chunk], v = vstage(s, chunk);
    if (mb >= m_ || mb >= st.next_forward[chunk]) return kUnknown;
    return v == pp_ * vpp_ - 1 ? f_end(v, mb) : b_end(v + 1, mb);
  }
  // When its next forward on `chunk` could start with at most `room` activations held before
  // it, or kUnknown.
  double forward_ready(int s, int chunk, int room) {
    const Stage& st = stage(s);
    const int mb = st.next_forward[chunk], v = vstage(s, chunk);
    if (mb >= m_ || st.in_flight >= room) return kUnknown;
    return v == 0 ? 0.0 : f_end(v - 1, mb);
  }
  // Its oldest pending W, at time t, or nothing.
  Choice oldest_weight(const Stage& st, double t) const {
    if (st.pending_weights.empty()) return {};
    return {ActionKind::WeightGrad, st.pending_weights.front().first, t,
            st.pending_weights.front().second};
  }

  int pp_, m_, vpp_;

 private:
  Placement placement_;
  PassCosts costs_;
  std::vector<Stage> stages_;
  std::vector<double> f_end_, b_end_;
};

// Plays a pipeline out: `passes` times, the stage whose next pass (Player::choose) starts first
// runs it (PipelinePlay::commit); ties go to the lower stage. Returns each stage's compute order.
template <typename Player>
std::vector<ComputeOrder> play_out(Player& player, int stages, int passes, const char* what) {
  for (int left = passes; left > 0; --left) {
    int best = -1;
    Choice pick;
    for (int s = 0; s < stages; ++s) {
      const Choice c = player.choose(s);
      if (c.valid() && c.start < pick.start) best = s, pick = c;
    }
    MT_CHECK(best >= 0, what, ": no stage can proceed with ", left, " passes left");
    player.commit(best, pick);
  }
  return player.orders();
}

// ZB-H1's choice (one chunk per stage).
class H1Player : public PipelinePlay {
 public:
  H1Player(int pp, int m, const PassCosts& costs)
      : PipelinePlay(pp, m, 1, Placement::Interleaved, costs, std::min(pp, m)) {}

  Choice choose(int s) {
    const Stage& st = stage(s);
    const double t = st.free_at;
    double rb = backward_ready(s, 0), rf = forward_ready(s, 0, st.limit);
    const int next_f = st.next_forward[0], next_b = st.next_backward[0];
    // After the warm-up (pp - s forwards) forwards and B's alternate, as in 1F1B.
    const bool warm = next_f < std::min(pp_ - s, m_);
    if (!warm && next_f < m_ && next_b < m_) (st.last_was_forward ? rf : rb) = kUnknown;
    if (rb != kUnknown && rb <= t) return {ActionKind::Backward, next_b, t};
    if (rf != kUnknown && rf <= t) return {ActionKind::Forward, next_f, t};
    if (const Choice w = oldest_weight(st, t); w.valid()) return w;
    Choice c;
    if (rb != kUnknown) c = {ActionKind::Backward, next_b, rb};
    if (rf != kUnknown && rf < c.start) c = {ActionKind::Forward, next_f, rf};
    return c;
  }
};

// ZB-V's choice over the V placement (two chunks per stage).
class VPlayer : public PipelinePlay {
 public:
  VPlayer(int pp, int m, const PassCosts& costs)
      : PipelinePlay(pp, m, 2, Placement::V, costs, 2 * std::min(pp, m)) {}

  Choice choose(int s) {
    const Stage& st = stage(s);
    const double t = st.free_at;
    Choice now, later;
    auto consider = [&](ActionKind kind, int chunk, double ready) {
      if (ready == kUnknown) return;
      const int mb = kind == ActionKind::Forward ? st.next_forward[chunk] : st.next_backward[chunk];
      if (ready <= t && !now.valid()) now = {kind, mb, t, chunk};
      if (ready > t && ready < later.start) later = {kind, mb, ready, chunk};
    };
    // The oldest ready B first (chunk 1 on a tie), then forwards, chunk 1 first. A chunk-0
    // forward (a new micro-batch) leaves room for one chunk-1 forward.
    const int first_b = st.next_backward[0] < st.next_backward[1] ? 0 : 1;
    consider(ActionKind::Backward, first_b, backward_ready(s, first_b));
    consider(ActionKind::Backward, 1 - first_b, backward_ready(s, 1 - first_b));
    consider(ActionKind::Forward, 1, forward_ready(s, 1, st.limit));
    consider(ActionKind::Forward, 0, forward_ready(s, 0, st.limit - 1));
    if (now.valid()) return now;
    if (const Choice w = oldest_weight(st, t); w.valid()) return w;
    return later;
  }
};

// The arguments every zero-bubble generator takes.
void check_arguments(const char* what, int pp, int microbatches, const PassCosts& costs) {
  MT_INPUT_CHECK(pp >= 2, what, ": needs a pipeline-parallel size >= 2, got ", pp);
  MT_INPUT_CHECK(microbatches >= 1, what, ": the number of micro-batches must be >= 1, got ",
                 microbatches);
  costs.validate();
}

}  // namespace

std::vector<ComputeOrder> zero_bubble_v_order(int pp, int microbatches, const PassCosts& costs) {
  check_arguments("zero-bubble V schedule", pp, microbatches, costs);
  VPlayer player(pp, microbatches, costs);
  return play_out(player, pp, 6 * pp * microbatches, "zero-bubble V");
}

std::vector<ComputeOrder> zero_bubble_h1_order(int pp, int microbatches, const PassCosts& costs) {
  check_arguments("zero-bubble H1 schedule", pp, microbatches, costs);
  H1Player player(pp, microbatches, costs);
  return play_out(player, pp, 3 * pp * microbatches, "zero-bubble H1");
}

std::vector<Action> with_point_to_point(int pp, int stage, const ComputeOrder& order,
                                        Placement placement, int vpp) {
  const int last = pp * vpp - 1;
  // The stage holding virtual stage u when it is another one, else -1.
  const auto remote = [&](int u) {
    if (u < 0 || u > last) return -1;
    const int s = stage_of(pp, u, placement);
    return s == stage ? -1 : s;
  };
  std::vector<Action> out;
  for (const Action& a : order) {
    const int v = virtual_stage(pp, stage, a.chunk, placement);
    const int prev = remote(v - 1), next = remote(v + 1);
    if (a.kind == ActionKind::Forward && prev >= 0)
      out.push_back({ActionKind::RecvActivation, a.microbatch, a.chunk, prev});
    if (a.kind == ActionKind::Backward && next >= 0)
      out.push_back({ActionKind::RecvGrad, a.microbatch, a.chunk, next});
    out.push_back(a);
    if (a.kind == ActionKind::Forward && next >= 0)
      out.push_back({ActionKind::SendActivation, a.microbatch, a.chunk, next});
    if (a.kind == ActionKind::Backward && prev >= 0)
      out.push_back({ActionKind::SendGrad, a.microbatch, a.chunk, prev});
  }
  return out;
}

Schedule buffered_pipeline(ScheduleKind kind, int pp, int microbatches, int vpp,
                           Placement placement, const std::vector<ComputeOrder>& orders) {
  Schedule s;
  s.kind = kind;
  s.pp = pp;
  s.vpp = vpp;
  s.microbatches = microbatches;
  s.buffered_sends = true;
  s.placement = placement;
  for (int st = 0; st < pp; ++st)
    s.ranks.push_back(with_point_to_point(pp, st, orders[static_cast<size_t>(st)], placement, vpp));
  return s;
}

Schedule zero_bubble_v(int pp, int microbatches, const PassCosts& costs) {
  return buffered_pipeline(ScheduleKind::ZeroBubbleV, pp, microbatches, 2, Placement::V,
                           zero_bubble_v_order(pp, microbatches, costs));
}

Schedule zero_bubble_h1(int pp, int microbatches, const PassCosts& costs) {
  return buffered_pipeline(ScheduleKind::ZeroBubbleH1, pp, microbatches, 1, Placement::Interleaved,
                           zero_bubble_h1_order(pp, microbatches, costs));
}

}  // namespace megatron::pipeline
