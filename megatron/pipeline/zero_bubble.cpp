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

// One stage while the greedy plays the pipeline out.
struct StagePlay {
  double free_at = 0;
  int next_forward = 0, next_backward = 0, in_flight = 0, limit = 0;
  bool last_was_forward = false;    // of its forwards and B's
  std::deque<int> pending_weights;  // micro-batches whose B ran and W did not
  ComputeOrder order;
};

// What a stage would do next, and when.
struct Choice {
  ActionKind kind = ActionKind::Forward;
  int microbatch = -1;
  double start = std::numeric_limits<double>::infinity();
  int chunk = 0;
  bool valid() const { return microbatch >= 0; }
};

// Plays a pipeline out: `passes` times, the stage whose next pass (Player::choose) starts first
// runs it (Player::commit); ties go to the lower stage. Returns each stage's compute order.
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

class H1Player {
 public:
  H1Player(int pp, int m, const PassCosts& costs)
      : pp_(pp),
        m_(m),
        costs_(costs),
        stages_(static_cast<size_t>(pp)),
        f_end_(static_cast<size_t>(pp * m), kUnknown),
        b_end_(static_cast<size_t>(pp * m), kUnknown) {
    for (auto& st : stages_) st.limit = std::min(pp, m);
  }

  std::vector<ComputeOrder> orders() {
    std::vector<ComputeOrder> out;
    for (auto& st : stages_) out.push_back(std::move(st.order));
    return out;
  }

 private:
  template <typename Player>
  friend std::vector<ComputeOrder> play_out(Player&, int, int, const char*);
  double& f_end(int s, int mb) { return f_end_[static_cast<size_t>(s * m_ + mb)]; }
  double& b_end(int s, int mb) { return b_end_[static_cast<size_t>(s * m_ + mb)]; }

  // When the next B of stage s could start (its forward ran and its output gradient is
  // there), or kUnknown.
  double backward_ready(int s) {
    const StagePlay& st = stages_[static_cast<size_t>(s)];
    const int mb = st.next_backward;
    if (mb >= m_ || mb >= st.next_forward) return kUnknown;
    return s == pp_ - 1 ? f_end(s, mb) : b_end(s + 1, mb);
  }
  double forward_ready(int s) {
    const StagePlay& st = stages_[static_cast<size_t>(s)];
    const int mb = st.next_forward;
    if (mb >= m_ || st.in_flight >= st.limit) return kUnknown;
    return s == 0 ? 0.0 : f_end(s - 1, mb);
  }

  Choice choose(int s) {
    const StagePlay& st = stages_[static_cast<size_t>(s)];
    const double t = st.free_at;
    double rb = backward_ready(s), rf = forward_ready(s);
    // After the warm-up (pp - s forwards) forwards and B's alternate, as in 1F1B.
    const bool warm = st.next_forward < std::min(pp_ - s, m_);
    if (!warm && st.next_forward < m_ && st.next_backward < m_)
      (st.last_was_forward ? rf : rb) = kUnknown;
    if (rb != kUnknown && rb <= t) return {ActionKind::Backward, st.next_backward, t};
    if (rf != kUnknown && rf <= t) return {ActionKind::Forward, st.next_forward, t};
    if (!st.pending_weights.empty()) return {ActionKind::WeightGrad, st.pending_weights.front(), t};
    Choice c;
    if (rb != kUnknown) c = {ActionKind::Backward, st.next_backward, rb};
    if (rf != kUnknown && rf < c.start) c = {ActionKind::Forward, st.next_forward, rf};
    return c;
  }

  void commit(int s, const Choice& c) {
    StagePlay& st = stages_[static_cast<size_t>(s)];
    double end = c.start;
    switch (c.kind) {
      case ActionKind::Forward:
        end += costs_.forward;
        f_end(s, c.microbatch) = end;
        ++st.next_forward;
        ++st.in_flight;
        break;
      case ActionKind::Backward:
        end += costs_.backward_input;
        b_end(s, c.microbatch) = end;
        ++st.next_backward;
        st.pending_weights.push_back(c.microbatch);
        break;
      default:
        end += costs_.weight;
        st.pending_weights.pop_front();
        --st.in_flight;
        break;
    }
    st.free_at = end;
    if (c.kind != ActionKind::WeightGrad) st.last_was_forward = c.kind == ActionKind::Forward;
    st.order.push_back({c.kind, c.microbatch, 0, -1});
  }

  int pp_, m_;
  PassCosts costs_;
  std::vector<StagePlay> stages_;
  std::vector<double> f_end_, b_end_;
};

// ZB-V's greedy over the V placement: per stage two chunks, times per chunk half a stage's.
class VPlayer {
 public:
  VPlayer(int pp, int m, const PassCosts& costs)
      : pp_(pp),
        m_(m),
        costs_(costs),
        stages_(static_cast<size_t>(pp)),
        f_end_(static_cast<size_t>(2 * pp * m), kUnknown),
        b_end_(static_cast<size_t>(2 * pp * m), kUnknown) {
    for (auto& st : stages_) st.limit = 2 * std::min(pp, m);
  }

  std::vector<ComputeOrder> orders() {
    std::vector<ComputeOrder> out;
    for (auto& st : stages_) out.push_back(std::move(st.order));
    return out;
  }

 private:
  template <typename Player>
  friend std::vector<ComputeOrder> play_out(Player&, int, int, const char*);
  struct Stage {
    double free_at = 0;
    int next_forward[2] = {0, 0}, next_backward[2] = {0, 0};
    int in_flight = 0, limit = 0;
    std::deque<std::pair<int, int>> pending_weights;  // (micro-batch, chunk) in B order
    ComputeOrder order;
  };
  int vstage(int s, int chunk) const { return virtual_stage(pp_, s, chunk, Placement::V); }
  double& f_end(int v, int mb) { return f_end_[static_cast<size_t>(v * m_ + mb)]; }
  double& b_end(int v, int mb) { return b_end_[static_cast<size_t>(v * m_ + mb)]; }

  double backward_ready(int s, int chunk) {
    const Stage& st = stages_[static_cast<size_t>(s)];
    const int mb = st.next_backward[chunk], v = vstage(s, chunk);
    if (mb >= m_ || mb >= st.next_forward[chunk]) return kUnknown;
    return v == 2 * pp_ - 1 ? f_end(v, mb) : b_end(v + 1, mb);
  }
  double forward_ready(int s, int chunk) {
    const Stage& st = stages_[static_cast<size_t>(s)];
    const int mb = st.next_forward[chunk], v = vstage(s, chunk);
    // A chunk-0 forward (a new micro-batch) leaves room for one chunk-1 forward.
    const int room = chunk == 0 ? st.limit - 1 : st.limit;
    if (mb >= m_ || st.in_flight >= room) return kUnknown;
    return v == 0 ? 0.0 : f_end(v - 1, mb);
  }

  Choice choose(int s) {
    const Stage& st = stages_[static_cast<size_t>(s)];
    const double t = st.free_at;
    Choice now, later;
    auto consider = [&](ActionKind kind, int chunk, double ready) {
      if (ready == kUnknown) return;
      const int mb = kind == ActionKind::Forward ? st.next_forward[chunk] : st.next_backward[chunk];
      if (ready <= t && !now.valid()) now = {kind, mb, t, chunk};
      if (ready > t && ready < later.start) later = {kind, mb, ready, chunk};
    };
    // The oldest ready B first (chunk 1 on a tie), then forwards, chunk 1 first.
    const int first_b = st.next_backward[0] < st.next_backward[1] ? 0 : 1;
    consider(ActionKind::Backward, first_b, backward_ready(s, first_b));
    consider(ActionKind::Backward, 1 - first_b, backward_ready(s, 1 - first_b));
    consider(ActionKind::Forward, 1, forward_ready(s, 1));
    consider(ActionKind::Forward, 0, forward_ready(s, 0));
    if (now.valid()) return now;
    if (!st.pending_weights.empty())
      return {ActionKind::WeightGrad, st.pending_weights.front().first, t,
              st.pending_weights.front().second};
    return later;
  }

  void commit(int s, const Choice& c) {
    Stage& st = stages_[static_cast<size_t>(s)];
    const int chunk = c.chunk, v = vstage(s, chunk);
    double end = c.start;
    switch (c.kind) {
      case ActionKind::Forward:
        end += costs_.forward / 2;
        f_end(v, c.microbatch) = end;
        ++st.next_forward[chunk];
        ++st.in_flight;
        break;
      case ActionKind::Backward:
        end += costs_.backward_input / 2;
        b_end(v, c.microbatch) = end;
        ++st.next_backward[chunk];
        st.pending_weights.push_back({c.microbatch, chunk});
        break;
      default:
        end += costs_.weight / 2;
        st.pending_weights.pop_front();
        --st.in_flight;
        break;
    }
    st.free_at = end;
    st.order.push_back({c.kind, c.microbatch, chunk, -1});
  }

  int pp_, m_;
  PassCosts costs_;
  std::vector<Stage> stages_;
  std::vector<double> f_end_, b_end_;
};

}  // namespace

std::vector<ComputeOrder> zero_bubble_v_order(int pp, int microbatches, const PassCosts& costs) {
  MT_INPUT_CHECK(pp >= 2, "zero-bubble V schedule: needs a pipeline-parallel size >= 2, got ", pp);
  MT_INPUT_CHECK(microbatches >= 1,
                 "zero-bubble V schedule: the number of micro-batches must be >= 1, got ",
                 microbatches);
  costs.validate();
  VPlayer player(pp, microbatches, costs);
  return play_out(player, pp, 6 * pp * microbatches, "zero-bubble V");
}

std::vector<ComputeOrder> zero_bubble_h1_order(int pp, int microbatches, const PassCosts& costs) {
  MT_INPUT_CHECK(pp >= 2, "zero-bubble H1 schedule: needs a pipeline-parallel size >= 2, got ", pp);
  MT_INPUT_CHECK(microbatches >= 1,
                 "zero-bubble H1 schedule: the number of micro-batches must be >= 1, got ",
                 microbatches);
  costs.validate();
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

Schedule zero_bubble_v(int pp, int microbatches, const PassCosts& costs) {
  const std::vector<ComputeOrder> orders = zero_bubble_v_order(pp, microbatches, costs);
  Schedule s;
  s.kind = ScheduleKind::ZeroBubbleV;
  s.pp = pp;
  s.vpp = 2;
  s.microbatches = microbatches;
  s.buffered_sends = true;
  s.placement = Placement::V;
  for (int st = 0; st < pp; ++st)
    s.ranks.push_back(
        with_point_to_point(pp, st, orders[static_cast<size_t>(st)], Placement::V, 2));
  return s;
}

Schedule zero_bubble_h1(int pp, int microbatches, const PassCosts& costs) {
  const std::vector<ComputeOrder> orders = zero_bubble_h1_order(pp, microbatches, costs);
  Schedule s;
  s.kind = ScheduleKind::ZeroBubbleH1;
  s.pp = pp;
  s.microbatches = microbatches;
  s.buffered_sends = true;
  for (int st = 0; st < pp; ++st)
    s.ranks.push_back(with_point_to_point(pp, st, orders[static_cast<size_t>(st)]));
  return s;
}

}  // namespace megatron::pipeline
