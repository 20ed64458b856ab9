#pragma once
// Runs the action lists of all ranks of a Schedule together under a simple cost model, the way a
// runtime would (see schedule.h): compute actions take time, a communication batch posts all its
// sends and receives at once and completes when all of them have. Matching is strict: a receive
// completes only with the send of the same message (same direction, micro-batch and virtual
// stage pair) having been posted. Reports deadlocks (no rank can progress while some have actions
// left, with the stuck batches), dependency violations, the timeline, per-rank activation
// memory (micro-batches in flight) and the bubble fraction.
#include <string>
#include <vector>

#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/timeline.h"

namespace megatron::pipeline {

struct CostModel {
  // Time of one micro-batch's forward / backward through ALL the layers of one rank; a chunk
  // takes 1/vpp of it (so schedules with different vpp do the same work per rank).
  double forward_s = 1.0;
  double backward_s = 2.0;
  double p2p_s = 0.0;  // time of one message from posting (both sides, see below) to arrival
  enum class SendMode {
    // A send completes when posted (the message is buffered); its receive completes p2p_s after
    // the send was posted, or when posted itself if later.
    Buffered,
    // A send completes together with its receive: p2p_s after both sides have been posted
    // (NCCL-like). Stricter: it exposes schedules that rely on buffering.
    Rendezvous,
  } send_mode = SendMode::Rendezvous;
  // The weight-gradient part of backward_s: a backward split off its W (a WeightGrad action of
  // the same micro-batch and chunk) takes backward_s - weight_s, the W weight_s.
  double weight_s = 0.0;
  // Per stage, when set (one entry per stage): forward_s, backward_s and weight_s of each stage
  // (unequal stages, e.g. measured from a run). Empty: every stage takes the values above.
  std::vector<double> stage_forward_s = {}, stage_backward_s = {}, stage_weight_s = {};
};

struct SimulationResult {
  bool deadlocked = false;
  std::vector<std::string> stuck;       // deadlock: one line per rank that could not finish
  std::vector<std::string> errors;      // dependency, matching and ordering violations
  std::vector<TimelineEvent> timeline;  // compute events, and one event per send/recv
  double makespan_s = 0;
  std::vector<double> busy_s;       // per rank: forward + backward (+ weight-gradient) time
  std::vector<int> peak_in_flight;  // per rank: most (micro-batch, chunk) forwards whose
                                    // backward (W when split) had not finished
  // Idle over total rank-time: 1 - sum(busy_s) / (pp * makespan_s). Communication is idle.
  double bubble_fraction = 0;

  bool ok() const { return !deadlocked && errors.empty(); }
  std::string report() const;  // errors and stuck ranks, one per line ("ok" when none)
};

// Schedules with buffered_sends are simulated with SendMode::Buffered whatever `cost` says.
// Checks done:
//  - structure: micro-batches, chunks and peers in range; a send's peer is the rank of the
//    neighbouring virtual stage; every forward/backward of every (micro-batch, virtual stage)
//    runs exactly once, and a W at most once, after its backward; a forward on v > 0 comes after
//    its RecvActivation completed on this rank, a backward after this rank's forward of it and (v <
//    last) after its RecvGrad; a send after the compute that produces it; every message sent is
//    received and vice versa;
//  - order: per (sender, receiver, direction) the sends are posted in the order of the receives
//    (what tag-per-direction FIFO matching needs);
//  - time: forward of v + 1 starts after forward of v ended, backward of v after backward of
//    v + 1 ended, backward after forward, on every (micro-batch, virtual stage).
SimulationResult simulate(const Schedule& schedule, const CostModel& cost = {});

}  // namespace megatron::pipeline
