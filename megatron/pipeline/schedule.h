#pragma once
// Pipeline-parallel schedules as per-rank action lists, independent of any model or runtime.
//
// A pipeline of `pp` ranks (stages) holds `vpp` model chunks per rank. Chunk c of stage s is
// virtual stage v = c * pp + s; layers are assigned to virtual stages in order, so a micro-batch
// flows forward through v = 0, 1, ..., pp * vpp - 1 and its gradient flows back the other way.
// With vpp = 1 the virtual stage is the stage.
//
// Each rank executes its list in order:
//  - Forward / Backward: run that micro-batch's forward or backward through local chunk `chunk`.
//    WeightGrad (zero-bubble schedules): a Backward whose (micro-batch, chunk) also has a
//    WeightGrad computes only the input gradient (B) and leaves the weight gradients queued;
//    the WeightGrad (W), later in the list, runs them.
//    A forward on virtual stage v > 0 takes its input from the RecvActivation (same micro-batch,
//    same chunk) completed earlier in the list; v = 0 reads the micro-batch from the data. A
//    backward on v < last takes the output gradient from the earlier RecvGrad; the last virtual
//    stage computes the loss instead.
//  - Communication: a maximal run of consecutive Send*/Recv* actions is ONE batch: post every
//    send and receive of the run with one Communicator::batch_isend_irecv, then wait for all of
//    them before the next compute action. (This is Megatron's send_forward_recv_backward & co.;
//    where Megatron makes two p2p calls back to back with no compute between them, e.g.
//    send_forward then recv_forward in the 1F1B warm-up, they fall into one batch here, which
//    can only remove waits.)
//  - Send/Recv actions name the LOCAL side: SendActivation(mb, c) sends the output of this
//    rank's forward of (mb, c) to virtual stage v + 1 on rank `peer_stage`; RecvActivation(mb, c)
//    receives the input of this rank's forward of (mb, c) from virtual stage v - 1 on
//    `peer_stage`. SendGrad(mb, c) sends the input gradient of this rank's backward of (mb, c) to
//    v - 1; RecvGrad(mb, c) receives the output gradient for this rank's backward of (mb, c) from
//    v + 1. With vpp > 1 the last stage sends activations to stage 0 (and stage 0 sends
//    gradients to the last stage): peers are ring neighbours.
//  - Messages between two ranks are matched in posting order per direction: use p2p_tag(kind)
//    as the tag so that activations and gradients between the same pair (pp = 2, or the ring
//    wrap-around) never match each other. The generators guarantee (and simulate() checks) that
//    per (sender, receiver, direction) the sends and receives are posted in the same order.
#include <string>
#include <utility>
#include <vector>

namespace megatron::pipeline {

// CpExchange is no schedule action: timelines record with it the context-parallel attention's
// key/value exchanges inside a forward or backward (from posting to completion).
enum class ActionKind {
  Forward,
  Backward,
  WeightGrad,
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  CpExchange
};

struct Action {
  ActionKind kind;
  int microbatch;
  int chunk = 0;        // model chunk on this rank (0 <= chunk < vpp)
  int peer_stage = -1;  // the other rank of a send/recv; -1 for Forward/Backward
  bool operator==(const Action&) const = default;
};

inline bool is_compute(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Backward || k == ActionKind::WeightGrad;
}
inline bool is_send(ActionKind k) {
  return k == ActionKind::SendActivation || k == ActionKind::SendGrad;
}
inline bool is_recv(ActionKind k) {
  return k == ActionKind::RecvActivation || k == ActionKind::RecvGrad;
}
inline bool carries_activation(ActionKind k) {
  return k == ActionKind::SendActivation || k == ActionKind::RecvActivation;
}
// The P2POp tag for a send/recv: 0 for activations, 1 for gradients.
inline int p2p_tag(ActionKind k) { return carries_activation(k) ? 0 : 1; }

// "forward", "backward", "weight_grad", "send_activation", "recv_activation", "send_grad",
// "recv_grad".
const char* action_kind_name(ActionKind k);
// Inverse of action_kind_name; throws InputError naming the text otherwise.
ActionKind parse_action_kind(const std::string& name);

inline int virtual_stage(int pp, int stage, int chunk) { return chunk * pp + stage; }

// Where the chunks sit. Interleaved: chunk c of stage s is virtual stage c * pp + s. V (ZB-V's,
// two chunks): chunk 0 of stage s is virtual stage s, chunk 1 is 2 pp - 1 - s, so stage 0 holds
// the first and the last virtual stage and stage pp - 1 hands its chunk 0's output to its own
// chunk 1 (no message: the runtime copies it).
enum class Placement { Interleaved, V };
inline int virtual_stage(int pp, int stage, int chunk, Placement placement) {
  if (placement == Placement::V) return chunk == 0 ? stage : 2 * pp - 1 - stage;
  return virtual_stage(pp, stage, chunk);
}
// The stage holding virtual stage v, and its chunk there.
inline int stage_of(int pp, int v, Placement placement) {
  if (placement == Placement::V) return v < pp ? v : 2 * pp - 1 - v;
  return v % pp;
}
inline int chunk_of(int pp, int v, Placement placement) {
  if (placement == Placement::V) return v < pp ? 0 : 1;
  return v / pp;
}

// Compact text, used by tests and error messages: F3 / B3 / W3 (micro-batch 3, chunk 0), F3.1
// (chunk 1), SA3->1 (send activation of micro-batch 3 to stage 1), RA3<-0, SG3->0, RG3<-2. Chunks
// are printed when `show_chunks` (then also ".0"). format_actions separates actions by spaces and
// wraps every communication batch in brackets: "F0 [SA0->1] F1 [SA1->1 RG0<-1] B0 ...".
std::string format_action(const Action& a, bool show_chunks = false);
std::string format_actions(const std::vector<Action>& actions, bool show_chunks = false);

// Index ranges [first, last) of the communication batches of a list (maximal runs of
// consecutive send/recv actions), in order.
std::vector<std::pair<size_t, size_t>> communication_batches(const std::vector<Action>& actions);

// --- generators (one rank's list) -------------------------------------------------------------
// Errors in the arguments (pp < 1, stage outside [0, pp), m < 1, vpp < 1, m not accepted by the
// interleaved schedule) throw megatron::InputError.

// Gradient accumulation on one stage: F0 B0 F1 B1 ... (Megatron's forward_backward_no_pipelining).
std::vector<Action> no_pipelining(int microbatches);

// Megatron's non-interleaved 1F1B (forward_backward_pipelining_without_interleaving): warm-up of
// min(pp - stage - 1, m) forwards, then one forward / one backward, then the remaining backwards.
std::vector<Action> one_f_one_b(int pp, int stage, int microbatches);

// Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving, without p2p
// overlap) with `vpp` model chunks per rank. Forwards run in groups of `group_size` micro-batches
// per chunk (Megatron's microbatch_group_size_per_vp_stage; 0 means pp): with the default, the
// forward number k runs micro-batch (k / (pp*vpp)) * pp + k % pp on chunk (k / pp) % vpp, and
// backward number k runs the same micro-batch on chunk vpp - 1 - (k / pp) % vpp. Warm-up:
// min(vpp*m, (pp - stage - 1) * 2 + (vpp - 1) * group_size) forwards. Requires pp > 1 and, as
// Megatron, pp <= group_size <= m and m % group_size == 0 or >= pp (so with the default group
// size, m must be a multiple of pp). vpp = 1 gives one_f_one_b.
std::vector<Action> interleaved_one_f_one_b(int pp, int stage, int microbatches, int vpp,
                                            int group_size = 0);

// --- whole pipelines -------------------------------------------------------------------------
enum class ScheduleKind {
  NoPipelining,
  OneFOneB,
  Interleaved,
  ZeroBubbleH1,
  ZeroBubbleV,
  DualPipeV
};
// "no_pipelining", "1f1b", "interleaved_1f1b", "zb_h1", "zb_v", "dualpipe_v"
const char* schedule_kind_name(ScheduleKind k);

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pp = 1, vpp = 1, microbatches = 0;
  std::vector<std::vector<Action>> ranks;  // ranks[stage]: that stage's action list
  // The lists are deadlock-free only when a send does not wait for its receive (the runtime
  // posts such sends and waits for them later; simulate() then models buffered sends). The
  // zero-bubble schedules place each send right after the compute that produces it.
  bool buffered_sends = false;
  Placement placement = Placement::Interleaved;
  std::string describe() const;  // e.g. "interleaved_1f1b pp=4 vpp=2 m=8"
};

// Relative times of one micro-batch's passes through one stage (the zero-bubble greedy plans on
// them; pipeline/zero_bubble.h).
struct PassCosts {
  double forward = 1, backward_input = 1, weight = 1;
  // Each finite and > 0; InputError naming the pass otherwise.
  void validate() const;
};

// NoPipelining needs pp == 1 and vpp == 1; OneFOneB needs vpp == 1; Interleaved with vpp == 1
// is OneFOneB. ZeroBubbleH1 (pipeline/zero_bubble.h, with its default costs) needs vpp == 1,
// ZeroBubbleV and DualPipeV (pipeline/dualpipe_v.h; m >= 2 pp) vpp == 2.
// `costs`: the pass times ZeroBubbleH1 and ZeroBubbleV plan on (the others ignore them).
Schedule make_schedule(ScheduleKind kind, int pp, int microbatches, int vpp = 1, int group_size = 0,
                       const PassCosts& costs = {});
// The natural schedule for a layout: no pipelining for pp = 1, 1F1B for vpp = 1, else
// interleaved.
Schedule make_schedule(int pp, int microbatches, int vpp = 1);

}  // namespace megatron::pipeline
