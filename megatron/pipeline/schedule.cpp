#include "megatron/pipeline/schedule.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/pipeline/dualpipe_v.h"
#include "megatron/pipeline/zero_bubble.h"

namespace megatron::pipeline {

const char* action_kind_name(ActionKind k) {
  switch (k) {
    case ActionKind::Forward:
      return "forward";
    case ActionKind::Backward:
      return "backward";
    case ActionKind::WeightGrad:
      return "weight_grad";
    case ActionKind::SendActivation:
      return "send_activation";
    case ActionKind::RecvActivation:
      return "recv_activation";
    case ActionKind::SendGrad:
      return "send_grad";
    case ActionKind::RecvGrad:
      return "recv_grad";
    case ActionKind::CpExchange:
      return "cp_exchange";
  }
  return "?";
}

ActionKind parse_action_kind(const std::string& name) {
  for (ActionKind k : {ActionKind::Forward, ActionKind::Backward, ActionKind::WeightGrad,
                       ActionKind::SendActivation, ActionKind::RecvActivation, ActionKind::SendGrad,
                       ActionKind::RecvGrad, ActionKind::CpExchange})
    if (name == action_kind_name(k)) return k;
  throw InputError(concat("unknown pipeline action kind '", name,
                          "' (expected forward, backward, weight_grad, send_activation, "
                          "recv_activation, "
                          "send_grad, recv_grad or cp_exchange)"));
}

std::string format_action(const Action& a, bool show_chunks) {
  std::ostringstream os;
  switch (a.kind) {
    case ActionKind::Forward:
      os << "F";
      break;
    case ActionKind::Backward:
      os << "B";
      break;
    case ActionKind::WeightGrad:
      os << "W";
      break;
    case ActionKind::SendActivation:
      os << "SA";
      break;
    case ActionKind::RecvActivation:
      os << "RA";
      break;
    case ActionKind::SendGrad:
      os << "SG";
      break;
    case ActionKind::RecvGrad:
      os << "RG";
      break;
    case ActionKind::CpExchange:
      os << "CP";
      break;
  }
  os << a.microbatch;
  if (show_chunks || a.chunk != 0) os << "." << a.chunk;
  if (is_send(a.kind)) os << "->" << a.peer_stage;
  if (is_recv(a.kind)) os << "<-" << a.peer_stage;
  return os.str();
}

std::string format_actions(const std::vector<Action>& actions, bool show_chunks) {
  std::string out;
  bool in_batch = false;
  for (const Action& a : actions) {
    const bool comm = !is_compute(a.kind);
    if (comm && in_batch) {
      out += " ";
    } else {
      if (in_batch) out += "]";
      if (!out.empty()) out += " ";
      if (comm) out += "[";
    }
    in_batch = comm;
    out += format_action(a, show_chunks);
  }
  if (in_batch) out += "]";
  return out;
}

std::vector<std::pair<size_t, size_t>> communication_batches(const std::vector<Action>& actions) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < actions.size();) {
    if (is_compute(actions[i].kind)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < actions.size() && !is_compute(actions[j].kind)) ++j;
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

namespace {

void check_stage(int pp, int stage, int microbatches) {
  MT_INPUT_CHECK(pp >= 1, "pipeline schedule: pipeline-parallel size must be >= 1, got ", pp);
  MT_INPUT_CHECK(stage >= 0 && stage < pp, "pipeline schedule: stage ", stage, " is outside [0, ",
                 pp, ")");
  MT_INPUT_CHECK(microbatches >= 1,
                 "pipeline schedule: the number of micro-batches must be >= 1, got ", microbatches);
}

Action compute(ActionKind k, int mb, int chunk = 0) { return {k, mb, chunk, -1}; }
Action comm(ActionKind k, int mb, int chunk, int peer) { return {k, mb, chunk, peer}; }

}  // namespace

std::vector<Action> no_pipelining(int microbatches) {
  check_stage(1, 0, microbatches);
  std::vector<Action> out;
  for (int i = 0; i < microbatches; ++i) {
    out.push_back(compute(ActionKind::Forward, i));
    out.push_back(compute(ActionKind::Backward, i));
  }
  return out;
}

std::vector<Action> one_f_one_b(int pp, int stage, int microbatches) {
  check_stage(pp, stage, microbatches);
  const int m = microbatches;
  const bool first = stage == 0, last = stage == pp - 1;
  const int warmup = std::min(pp - stage - 1, m);
  const int remaining = m - warmup;
  std::vector<Action> out;
  auto recv_act = [&](int mb) {
    if (!first) out.push_back(comm(ActionKind::RecvActivation, mb, 0, stage - 1));
  };
  auto send_act = [&](int mb) {
    if (!last) out.push_back(comm(ActionKind::SendActivation, mb, 0, stage + 1));
  };
  auto recv_grad = [&](int mb) {
    if (!last) out.push_back(comm(ActionKind::RecvGrad, mb, 0, stage + 1));
  };
  auto send_grad = [&](int mb) {
    if (!first) out.push_back(comm(ActionKind::SendGrad, mb, 0, stage - 1));
  };

  // Warm-up: forwards only.
  for (int i = 0; i < warmup; ++i) {
    recv_act(i);
    out.push_back(compute(ActionKind::Forward, i));
    send_act(i);
  }
  if (remaining > 0) recv_act(warmup);
  // Steady state: forward of micro-batch warmup + i, backward of micro-batch i.
  for (int i = 0; i < remaining; ++i) {
    const int f = warmup + i;
    out.push_back(compute(ActionKind::Forward, f));
    send_act(f);  // send_forward_recv_backward
    recv_grad(i);
    out.push_back(compute(ActionKind::Backward, i));
    send_grad(i);  // send_backward_recv_forward (send_backward on the last iteration)
    if (i + 1 < remaining) recv_act(f + 1);
  }
  // Cool-down: the backwards of the warm-up micro-batches.
  for (int i = remaining; i < m; ++i) {
    recv_grad(i);
    out.push_back(compute(ActionKind::Backward, i));
    send_grad(i);
  }
  return out;
}

std::vector<Action> interleaved_one_f_one_b(int pp, int stage, int microbatches, int vpp,
                                            int group_size) {
  check_stage(pp, stage, microbatches);
  MT_INPUT_CHECK(vpp >= 1,
                 "interleaved pipeline schedule: virtual pipeline size must be >= 1, got ", vpp);
  if (vpp == 1) return one_f_one_b(pp, stage, microbatches);
  MT_INPUT_CHECK(pp > 1, "interleaved pipeline schedule: needs a pipeline-parallel size > 1 (got ",
                 pp, " with virtual pipeline size ", vpp, ")");
  const int m = microbatches;
  const int group = group_size == 0 ? pp : group_size;
  if (group_size == 0) {
    MT_INPUT_CHECK(m % pp == 0, "interleaved pipeline schedule: the number of micro-batches (", m,
                   ") must be a multiple of the pipeline-parallel size (", pp, ")");
  }
  MT_INPUT_CHECK(group >= pp && group <= m,
                 "interleaved pipeline schedule: the micro-batch group size per virtual stage (",
                 group, ") must be in [pp=", pp, ", m=", m, "]");
  MT_INPUT_CHECK(m % group == 0 || m % group >= pp,
                 "interleaved pipeline schedule: the remainder of m=", m,
                 " divided by the group size ", group, " must be 0 or >= pp=", pp);

  // The forward order: (micro-batch, chunk) of forward number k. Groups of `group` micro-batches
  // run through every chunk before the next group starts; the last group takes what is left.
  struct Slot {
    int mb, chunk;
  };
  std::vector<Slot> table;
  for (int first = 0; first < m; first += group) {
    const int end = first + group >= m ? m : first + group;
    for (int c = 0; c < vpp; ++c)
      for (int mb = first; mb < end; ++mb) table.push_back({mb, c});
    if (end == m) break;
  }
  const int total = m * vpp;
  auto fwd = [&](int k) { return table[static_cast<size_t>(k % total)]; };
  auto bwd = [&](int k) {
    Slot s = table[static_cast<size_t>(k % total)];
    s.chunk = vpp - 1 - s.chunk;
    return s;
  };

  const bool first_rank = stage == 0, last_rank = stage == pp - 1;
  const int next = (stage + 1) % pp, prev = (stage + pp - 1) % pp;
  int warmup = (pp - stage - 1) * 2 + (vpp - 1) * group;
  const bool all_warmup = warmup >= total;
  warmup = std::min(warmup, total);
  const int remaining = total - warmup;

  // What this rank receives right after forward number k: the input of a later forward. Most
  // ranks take the input of forward k + 1 from the previous rank. Rank 0 receives from the last
  // rank, which runs pp - 1 forwards behind it: the output of the last rank's forward
  // k - (pp - 1), the input of the next chunk here (nothing when that was the last chunk).
  auto recv_after_forward = [&](int k) -> std::optional<Slot> {
    if (k == total - 1) return std::nullopt;
    if (!first_rank) return fwd(k + 1);
    if (k < pp - 1) return std::nullopt;
    Slot s = fwd(k - (pp - 1));
    if (s.chunk == vpp - 1) return std::nullopt;
    return Slot{s.mb, s.chunk + 1};
  };
  // Mirror image for gradients: after backward number k, the output gradient of backward k + 1
  // from the next rank; the last rank receives the input gradient of rank 0's backward
  // k - (pp - 1), for the previous chunk here.
  auto recv_after_backward = [&](int k) -> std::optional<Slot> {
    if (k == total - 1) return std::nullopt;
    if (!last_rank) return bwd(k + 1);
    if (k < pp - 1) return std::nullopt;
    Slot s = bwd(k - (pp - 1));
    if (s.chunk == 0) return std::nullopt;
    return Slot{s.mb, s.chunk - 1};
  };

  std::vector<Action> out;
  auto forward = [&](int k) {
    const Slot s = fwd(k);
    out.push_back(compute(ActionKind::Forward, s.mb, s.chunk));
  };
  auto backward = [&](int k) {
    const Slot s = bwd(k);
    out.push_back(compute(ActionKind::Backward, s.mb, s.chunk));
  };
  auto send_act = [&](int k) {  // not from the last virtual stage
    const Slot s = fwd(k);
    if (!(last_rank && s.chunk == vpp - 1))
      out.push_back(comm(ActionKind::SendActivation, s.mb, s.chunk, next));
  };
  auto send_grad = [&](int k) {  // not from the first virtual stage
    const Slot s = bwd(k);
    if (!(first_rank && s.chunk == 0))
      out.push_back(comm(ActionKind::SendGrad, s.mb, s.chunk, prev));
  };
  auto recv_act = [&](std::optional<Slot> s) {
    if (s) out.push_back(comm(ActionKind::RecvActivation, s->mb, s->chunk, prev));
  };
  auto recv_grad = [&](std::optional<Slot> s) {
    if (s) out.push_back(comm(ActionKind::RecvGrad, s->mb, s->chunk, next));
  };
  // The gradient for backward 0 (last chunk): from the next rank unless this is the last one.
  auto first_grad = [&]() -> std::optional<Slot> {
    if (last_rank) return std::nullopt;
    return bwd(0);
  };

  if (!first_rank) recv_act(fwd(0));
  for (int k = 0; k < warmup; ++k) {
    forward(k);
    send_act(k);
    recv_act(recv_after_forward(k));
    if (k == warmup - 1 && !all_warmup) recv_grad(first_grad());
  }
  for (int k = 0; k < remaining; ++k) {
    const int f = k + warmup;
    forward(f);
    backward(k);
    send_act(f);
    send_grad(k);
    if (k + 1 < remaining) recv_act(recv_after_forward(f));
    recv_grad(recv_after_backward(k));
  }
  if (all_warmup) recv_grad(first_grad());
  for (int k = remaining; k < total; ++k) {
    backward(k);
    send_grad(k);
    recv_grad(recv_after_backward(k));
  }
  return out;
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::NoPipelining:
      return "no_pipelining";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved:
      return "interleaved_1f1b";
    case ScheduleKind::ZeroBubbleH1:
      return "zb_h1";
    case ScheduleKind::ZeroBubbleV:
      return "zb_v";
    case ScheduleKind::DualPipeV:
      return "dualpipe_v";
  }
  return "?";
}

std::string Schedule::describe() const {
  std::ostringstream os;
  os << schedule_kind_name(kind) << " pp=" << pp;
  if (vpp != 1) os << " vpp=" << vpp;
  os << " m=" << microbatches;
  return os.str();
}

Schedule make_schedule(ScheduleKind kind, int pp, int microbatches, int vpp, int group_size,
                       const PassCosts& costs) {
  MT_INPUT_CHECK(pp >= 1, "pipeline schedule: pipeline-parallel size must be >= 1, got ", pp);
  MT_INPUT_CHECK(vpp >= 1, "pipeline schedule: virtual pipeline size must be >= 1, got ", vpp);
  if (kind == ScheduleKind::Interleaved && vpp == 1) kind = ScheduleKind::OneFOneB;
  Schedule s;
  s.kind = kind;
  s.pp = pp;
  s.vpp = vpp;
  s.microbatches = microbatches;
  switch (kind) {
    case ScheduleKind::NoPipelining:
      MT_INPUT_CHECK(pp == 1 && vpp == 1,
                     "pipeline schedule: no_pipelining needs pp = 1 and vpp = 1 (got pp=", pp,
                     ", vpp=", vpp, ")");
      s.ranks.push_back(no_pipelining(microbatches));
      break;
    case ScheduleKind::OneFOneB:
      MT_INPUT_CHECK(vpp == 1, "pipeline schedule: 1f1b needs vpp = 1 (got ", vpp,
                     "); use the interleaved schedule");
      for (int st = 0; st < pp; ++st) s.ranks.push_back(one_f_one_b(pp, st, microbatches));
      break;
    case ScheduleKind::Interleaved:
      for (int st = 0; st < pp; ++st)
        s.ranks.push_back(interleaved_one_f_one_b(pp, st, microbatches, vpp, group_size));
      break;
    case ScheduleKind::ZeroBubbleH1:
      MT_INPUT_CHECK(vpp == 1, "pipeline schedule: zb_h1 needs vpp = 1 (got ", vpp, ")");
      return zero_bubble_h1(pp, microbatches, costs);
    case ScheduleKind::ZeroBubbleV:
      MT_INPUT_CHECK(vpp == 2, "pipeline schedule: zb_v needs vpp = 2 (got ", vpp, ")");
      return zero_bubble_v(pp, microbatches, costs);
    case ScheduleKind::DualPipeV:
      MT_INPUT_CHECK(vpp == 2, "pipeline schedule: dualpipe_v needs vpp = 2 (got ", vpp, ")");
      return dualpipe_v(pp, microbatches);
  }
  return s;
}

Schedule make_schedule(int pp, int microbatches, int vpp) {
  if (pp == 1 && vpp == 1) return make_schedule(ScheduleKind::NoPipelining, 1, microbatches);
  if (vpp == 1) return make_schedule(ScheduleKind::OneFOneB, pp, microbatches);
  return make_schedule(ScheduleKind::Interleaved, pp, microbatches, vpp);
}

}  // namespace megatron::pipeline
