#include "megatron/pipeline/simulator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "megatron/core/error.h"

namespace megatron::pipeline {

std::string SimulationResult::report() const {
  if (ok()) return "ok";
  std::ostringstream os;
  if (deadlocked) os << "deadlock:\n";
  for (const auto& s : stuck) os << "  " << s << "\n";
  for (const auto& e : errors) os << e << "\n";
  return os.str();
}

namespace {

constexpr double kUnset = -1;
constexpr size_t kMaxErrors = 64;

// One message: an activation (dir 0) sent from virtual stage v to v + 1, or a gradient (dir 1)
// sent from v to v - 1, of one micro-batch.
struct Message {
  bool send_posted = false, recv_posted = false, received = false;
  double send_post = kUnset, recv_post = kUnset;
  int recv_rank = -1;
};

// Per (micro-batch, virtual stage) compute record.
struct Work {
  int forwards = 0, backwards = 0, weights = 0;
  bool split = false;  // the schedule has a WeightGrad for it
  double f_start = kUnset, f_end = kUnset, b_start = kUnset, b_end = kUnset;
};

struct RankState {
  size_t pc = 0;
  double clock = 0;
  bool batch_posted = false;
  int in_flight = 0;
};

class Simulator {
 public:
  Simulator(const Schedule& s, const CostModel& cost)
      : s_(s), cost_(cost), pp_(s.pp), vpp_(s.vpp), m_(s.microbatches), nv_(s.pp * s.vpp) {
    if (s.buffered_sends) cost_.send_mode = CostModel::SendMode::Buffered;
  }

  SimulationResult run() {
    MT_INPUT_CHECK(pp_ >= 1 && vpp_ >= 1 && m_ >= 0, "simulate: bad schedule shape pp=", pp_,
                   " vpp=", vpp_, " m=", m_);
    MT_INPUT_CHECK(static_cast<int>(s_.ranks.size()) == pp_, "simulate: the schedule has ",
                   s_.ranks.size(), " rank lists for pp=", pp_);
    MT_INPUT_CHECK(cost_.forward_s >= 0 && cost_.backward_s >= 0 && cost_.p2p_s >= 0 &&
                       cost_.weight_s >= 0 && cost_.weight_s <= cost_.backward_s,
                   "simulate: costs must be >= 0 and weight_s <= backward_s");
    messages_.assign(static_cast<size_t>(2 * m_ * nv_), Message{});
    work_.assign(static_cast<size_t>(m_ * nv_), Work{});
    check_stage_costs();
    mark_split();
    ranks_.assign(static_cast<size_t>(pp_), RankState{});
    res_.busy_s.assign(static_cast<size_t>(pp_), 0.0);
    res_.peak_in_flight.assign(static_cast<size_t>(pp_), 0);

    check_order();
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < pp_; ++r)
        while (step(r)) progress = true;
    }
    for (int r = 0; r < pp_; ++r)
      if (ranks_[static_cast<size_t>(r)].pc < list(r).size()) describe_stuck(r);
    res_.deadlocked = !res_.stuck.empty();
    if (!res_.deadlocked) check_completion();

    for (const auto& rs : ranks_) res_.makespan_s = std::max(res_.makespan_s, rs.clock);
    double busy = 0;
    for (double b : res_.busy_s) busy += b;
    res_.bubble_fraction = res_.makespan_s > 0 ? 1.0 - busy / (pp_ * res_.makespan_s) : 0.0;
    return std::move(res_);
  }

 private:
  const std::vector<Action>& list(int r) const { return s_.ranks[static_cast<size_t>(r)]; }

  template <typename... Parts>
  void error(Parts&&... parts) {
    if (res_.errors.size() < kMaxErrors) {
      res_.errors.push_back(concat(std::forward<Parts>(parts)...));
    } else if (res_.errors.size() == kMaxErrors) {
      res_.errors.push_back("... (further errors not shown)");
    }
  }

  std::string where(int r, size_t i) const {
    return concat("stage ", r, " action #", i, " (", format_action(list(r)[i], vpp_ > 1), ")");
  }

  // Range checks of an action's fields; the virtual stage it runs on, or -1 when invalid.
  int validate(int r, size_t i) {
    const Action& a = list(r)[i];
    if (a.microbatch < 0 || a.microbatch >= m_) {
      error(where(r, i), ": micro-batch outside [0, ", m_, ")");
      return -1;
    }
    if (a.chunk < 0 || a.chunk >= vpp_) {
      error(where(r, i), ": chunk outside [0, ", vpp_, ")");
      return -1;
    }
    return virtual_stage(pp_, r, a.chunk, s_.placement);
  }

  Work& work(int mb, int v) { return work_[static_cast<size_t>(mb * nv_ + v)]; }
  size_t message_index(int dir, int mb, int v_from) const {
    return static_cast<size_t>((dir * m_ + mb) * nv_ + v_from);
  }

  // The message a send/recv action refers to, or npos (error reported) when it is malformed.
  static constexpr size_t npos = std::numeric_limits<size_t>::max();
  size_t message_of(int r, size_t i, int v) {
    const Action& a = list(r)[i];
    int v_from = 0, v_to = 0;
    switch (a.kind) {
      case ActionKind::SendActivation:
        v_from = v, v_to = v + 1;
        break;
      case ActionKind::RecvActivation:
        v_from = v - 1, v_to = v;
        break;
      case ActionKind::SendGrad:
        v_from = v, v_to = v - 1;
        break;
      case ActionKind::RecvGrad:
        v_from = v + 1, v_to = v;
        break;
      default:
        return npos;
    }
    if (v_from < 0 || v_from >= nv_ || v_to < 0 || v_to >= nv_) {
      error(where(r, i), ": virtual stage ", v, " has no ", v_to < v ? "previous" : "next",
            " stage to ", is_send(a.kind) ? "send to" : "receive from");
      return npos;
    }
    const int other = is_send(a.kind) ? v_to : v_from;
    const int peer = stage_of(pp_, other, s_.placement);
    if (peer == r) {
      error(where(r, i), ": virtual stage ", other, " is on this stage: nothing to send");
      return npos;
    }
    if (a.peer_stage != peer) {
      error(where(r, i), ": peer should be stage ", peer, " (virtual stage ", other, ")");
      return npos;
    }
    return message_index(carries_activation(a.kind) ? 0 : 1, a.microbatch, v_from);
  }

  // Advances rank r by one compute action or one communication step; false when it cannot.
  bool step(int r) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const auto& acts = list(r);
    if (st.pc >= acts.size()) return false;
    if (is_compute(acts[st.pc].kind)) {
      run_compute(r, st.pc);
      ++st.pc;
      return true;
    }
    size_t end = st.pc;
    while (end < acts.size() && !is_compute(acts[end].kind)) ++end;
    if (!st.batch_posted) {
      post_batch(r, st.pc, end);
      st.batch_posted = true;
      return true;
    }
    return try_complete_batch(r, st.pc, end);
  }

  void check_stage_costs() const {
    for (const auto* v : {&cost_.stage_forward_s, &cost_.stage_backward_s, &cost_.stage_weight_s})
      MT_INPUT_CHECK(v->empty() || static_cast<int>(v->size()) == pp_,
                     "simulate: per-stage costs need one entry per stage (", pp_, "), got ",
                     v->size());
    for (int r = 0; r < pp_; ++r)
      MT_INPUT_CHECK(of_stage(cost_.stage_weight_s, r, cost_.weight_s) <=
                         of_stage(cost_.stage_backward_s, r, cost_.backward_s),
                     "simulate: stage ", r, "'s weight_s exceeds its backward_s");
  }

  // Which (micro-batch, virtual stage) backwards have their W split off.
  void mark_split() {
    for (int r = 0; r < pp_; ++r)
      for (const Action& a : list(r))
        if (a.kind == ActionKind::WeightGrad && a.microbatch >= 0 && a.microbatch < m_ &&
            a.chunk >= 0 && a.chunk < vpp_)
          work(a.microbatch, virtual_stage(pp_, r, a.chunk, s_.placement)).split = true;
  }

  // A stage's own time when given, else the common one.
  static double of_stage(const std::vector<double>& per_stage, int r, double common) {
    return per_stage.empty() ? common : per_stage[static_cast<size_t>(r)];
  }

  double duration(int r, const Action& a, int v) {
    const bool split = v >= 0 && work(a.microbatch, v).split;
    const double f = of_stage(cost_.stage_forward_s, r, cost_.forward_s);
    const double b = of_stage(cost_.stage_backward_s, r, cost_.backward_s);
    const double w = of_stage(cost_.stage_weight_s, r, cost_.weight_s);
    switch (a.kind) {
      case ActionKind::Forward:
        return f / vpp_;
      case ActionKind::Backward:
        return (split ? b - w : b) / vpp_;
      default:
        return w / vpp_;
    }
  }

  void run_weight_grad(int r, size_t i, Work& w) {
    if (++w.weights > 1) error(where(r, i), ": weight gradient runs a second time");
    if (w.backwards == 0) error(where(r, i), ": weight gradient before its backward");
    --ranks_[static_cast<size_t>(r)].in_flight;
  }

  void run_compute(int r, size_t i) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const Action& a = list(r)[i];
    const int v = validate(r, i);
    const bool fwd = a.kind == ActionKind::Forward;
    const double dur = duration(r, a, v);
    const double start = st.clock, end = start + dur;
    st.clock = end;
    res_.busy_s[static_cast<size_t>(r)] += dur;
    res_.timeline.push_back({r, a.kind, a.microbatch, a.chunk, start, end});
    if (v < 0) return;
    Work& w = work(a.microbatch, v);
    if (a.kind == ActionKind::WeightGrad) return run_weight_grad(r, i, w);
    if (fwd) {
      if (++w.forwards > 1) error(where(r, i), ": forward runs a second time");
      // Input: the received activation, or the local previous virtual stage when it is here.
      if (v > 0 && !input_ready(r, 0, a.microbatch, v - 1))
        error(where(r, i), ": forward before its input activation was received");
      w.f_start = start;
      w.f_end = end;
      ++st.in_flight;
      int& peak = res_.peak_in_flight[static_cast<size_t>(r)];
      peak = std::max(peak, st.in_flight);
    } else {
      if (++w.backwards > 1) error(where(r, i), ": backward runs a second time");
      if (w.forwards == 0) error(where(r, i), ": backward before the forward of it on this stage");
      if (v < nv_ - 1 && !input_ready(r, 1, a.microbatch, v + 1))
        error(where(r, i), ": backward before its output gradient was received");
      w.b_start = start;
      w.b_end = end;
      if (!w.split) --st.in_flight;
    }
  }

  // Whether rank r has the input of direction `dir` coming from virtual stage v_from.
  bool input_ready(int r, int dir, int mb, int v_from) {
    if (stage_of(pp_, v_from, s_.placement) == r) {  // on this rank: the local compute ran
      const Work& w = work(mb, v_from);
      return dir == 0 ? w.forwards > 0 : w.backwards > 0;
    }
    const Message& msg = messages_[message_index(dir, mb, v_from)];
    return msg.received && msg.recv_rank == r;
  }

  void post_batch(int r, size_t first, size_t end) {
    const double t = ranks_[static_cast<size_t>(r)].clock;
    for (size_t i = first; i < end; ++i) {
      const Action& a = list(r)[i];
      const int v = validate(r, i);
      if (v < 0) continue;
      const size_t k = message_of(r, i, v);
      if (k == npos) continue;
      Message& msg = messages_[k];
      if (is_send(a.kind)) {
        const Work& w = work(a.microbatch, v);
        if (a.kind == ActionKind::SendActivation && w.forwards == 0)
          error(where(r, i), ": sends an activation before computing it");
        if (a.kind == ActionKind::SendGrad && w.backwards == 0)
          error(where(r, i), ": sends a gradient before computing it");
        if (msg.send_posted) error(where(r, i), ": the same message is sent twice");
        msg.send_posted = true;
        msg.send_post = t;
      } else {
        if (msg.recv_posted) error(where(r, i), ": the same message is received twice");
        msg.recv_posted = true;
        msg.recv_post = t;
        msg.recv_rank = r;
      }
    }
  }

  bool try_complete_batch(int r, size_t first, size_t end) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const bool rendezvous = cost_.send_mode == CostModel::SendMode::Rendezvous;
    std::vector<std::pair<size_t, double>> done;  // action index, completion time
    for (size_t i = first; i < end; ++i) {
      const Action& a = list(r)[i];
      const int v = a.microbatch >= 0 && a.microbatch < m_ && a.chunk >= 0 && a.chunk < vpp_
                        ? virtual_stage(pp_, r, a.chunk, s_.placement)
                        : -1;
      const size_t k = v < 0 ? npos : quiet_message_of(r, i, v);
      if (k == npos) {  // malformed: already reported, completes at once
        done.emplace_back(i, st.clock);
        continue;
      }
      const Message& msg = messages_[k];
      if (is_send(a.kind)) {
        if (!rendezvous) {
          done.emplace_back(i, msg.send_post);
        } else {
          if (!msg.recv_posted) return false;
          done.emplace_back(i, std::max(msg.send_post, msg.recv_post) + cost_.p2p_s);
        }
      } else {
        if (!msg.send_posted) return false;
        done.emplace_back(i, rendezvous ? std::max(msg.send_post, msg.recv_post) + cost_.p2p_s
                                        : std::max(msg.recv_post, msg.send_post + cost_.p2p_s));
      }
    }
    double finish = st.clock;
    for (auto [i, t] : done) {
      const Action& a = list(r)[i];
      finish = std::max(finish, t);
      res_.timeline.push_back({r, a.kind, a.microbatch, a.chunk, st.clock, t});
      if (is_recv(a.kind)) {
        const int v = virtual_stage(pp_, r, a.chunk, s_.placement);
        const size_t k = quiet_message_of(r, i, v);
        if (k != npos) messages_[k].received = true;
      }
    }
    st.clock = finish;
    st.pc = end;
    st.batch_posted = false;
    return true;
  }

  // message_of without reporting (the batch was validated when posted).
  size_t quiet_message_of(int r, size_t i, int v) {
    const size_t saved = res_.errors.size();
    const size_t k = message_of(r, i, v);
    res_.errors.resize(saved);
    return k;
  }

  void describe_stuck(int r) {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    const auto& acts = list(r);
    size_t end = st.pc;
    while (end < acts.size() && !is_compute(acts[end].kind)) ++end;
    std::ostringstream os;
    os << "stage " << r << " stuck at action #" << st.pc << " of " << acts.size() << ", batch [";
    std::vector<std::string> waits;
    for (size_t i = st.pc; i < end; ++i) {
      const Action& a = acts[i];
      os << (i > st.pc ? " " : "") << format_action(a, vpp_ > 1);
      const int v = a.microbatch >= 0 && a.microbatch < m_ && a.chunk >= 0 && a.chunk < vpp_
                        ? virtual_stage(pp_, r, a.chunk, s_.placement)
                        : -1;
      const size_t k = v < 0 ? npos : quiet_message_of(r, i, v);
      if (k == npos) continue;
      const Message& msg = messages_[k];
      if (is_recv(a.kind) && !msg.send_posted)
        waits.push_back(
            concat(format_action(a, vpp_ > 1), " waits for stage ", a.peer_stage, " to send it"));
      if (is_send(a.kind) && cost_.send_mode == CostModel::SendMode::Rendezvous && !msg.recv_posted)
        waits.push_back(concat(format_action(a, vpp_ > 1), " waits for stage ", a.peer_stage,
                               " to receive it"));
    }
    os << "]";
    for (size_t j = 0; j < waits.size(); ++j) os << (j ? "; " : ": ") << waits[j];
    res_.stuck.push_back(os.str());
  }

  // Sends and receives of each (sender, receiver, direction) channel must be posted in the same
  // order, or FIFO matching (one tag per direction) would pair the wrong messages.
  void check_order() {
    using Channel = std::tuple<int, int, int>;  // sender, receiver, direction
    std::map<Channel, std::vector<std::pair<int, int>>> sends,
        recvs;  // (micro-batch, chunk-free v)
    for (int r = 0; r < pp_; ++r) {
      for (const Action& a : list(r)) {
        if (is_compute(a.kind)) continue;
        const int dir = carries_activation(a.kind) ? 0 : 1;
        const int v = virtual_stage(pp_, r, a.chunk, s_.placement);
        if (is_send(a.kind)) {
          sends[{r, a.peer_stage, dir}].emplace_back(a.microbatch, v);
        } else {
          // Name the message by its sender's virtual stage.
          recvs[{a.peer_stage, r, dir}].emplace_back(a.microbatch, dir == 0 ? v - 1 : v + 1);
        }
      }
    }
    for (const auto& [ch, sent] : sends) {
      auto it = recvs.find(ch);
      if (it == recvs.end()) continue;
      const auto& got = it->second;
      for (size_t j = 0; j < std::min(sent.size(), got.size()); ++j) {
        if (sent[j] != got[j]) {
          error("order: message #", j, " from stage ", std::get<0>(ch), " to stage ",
                std::get<1>(ch), std::get<2>(ch) == 0 ? " (activations)" : " (gradients)",
                " is micro-batch ", sent[j].first, " of virtual stage ", sent[j].second,
                " but the receiver expects micro-batch ", got[j].first, " of virtual stage ",
                got[j].second);
          break;
        }
      }
    }
  }

  void check_completion() {
    for (int mb = 0; mb < m_; ++mb) {
      for (int v = 0; v < nv_; ++v) {
        const Work& w = work(mb, v);
        const std::string name =
            concat("micro-batch ", mb, " virtual stage ", v, " (stage ",
                   stage_of(pp_, v, s_.placement), " chunk ", chunk_of(pp_, v, s_.placement), ")");
        if (w.forwards != 1) error(name, ": ", w.forwards, " forwards, expected 1");
        if (w.backwards != 1) error(name, ": ", w.backwards, " backwards, expected 1");
        if (w.forwards == 0 || w.backwards == 0) continue;
        if (w.b_start < w.f_end) error(name, ": backward starts before its forward ended");
        if (v > 0) {
          const Work& p = work(mb, v - 1);
          if (p.forwards > 0 && w.f_start < p.f_end)
            error(name, ": forward starts before the forward of virtual stage ", v - 1, " ended");
        }
        if (v + 1 < nv_) {
          const Work& n = work(mb, v + 1);
          if (n.backwards > 0 && w.b_start < n.b_end)
            error(name, ": backward starts before the backward of virtual stage ", v + 1, " ended");
        }
      }
    }
    for (int dir = 0; dir < 2; ++dir)
      for (int mb = 0; mb < m_; ++mb)
        for (int v = 0; v < nv_; ++v) {
          const Message& msg = messages_[message_index(dir, mb, v)];
          if (msg.send_posted && !msg.recv_posted)
            error(dir == 0 ? "activation" : "gradient", " of micro-batch ", mb,
                  " from virtual stage ", v, " is sent but never received");
        }
  }

  const Schedule& s_;
  CostModel cost_;
  int pp_, vpp_, m_, nv_;
  std::vector<Message> messages_;
  std::vector<Work> work_;
  std::vector<RankState> ranks_;
  SimulationResult res_;
};

}  // namespace

SimulationResult simulate(const Schedule& schedule, const CostModel& cost) {
  return Simulator(schedule, cost).run();
}

}  // namespace megatron::pipeline
