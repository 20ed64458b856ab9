#pragma once
// Zero-bubble pipeline schedules (Qi et al., 2024, "Zero Bubble Pipeline Parallelism"): each
// backward split into B (the input gradient, on the critical path between stages) and W (the
// weight gradients, needed only by the optimizer step), the W's moved into what 1F1B leaves
// idle. The lists are made by playing the stages out on relative pass times (the paper's greedy
// heuristic), so measured F/B/W times give the schedule for the machine at hand.
#include <vector>

#include "megatron/pipeline/schedule.h"

namespace megatron::pipeline {

// The compute order of one stage: Forward, Backward (B only) and WeightGrad actions.
using ComputeOrder = std::vector<Action>;

// ZB-H1 (the paper's schedule at 1F1B's peak activation memory): every stage holds at most
// min(pp, m) micro-batches whose W has not run (1F1B's peak, stage 0's). Stage s warms up with
// min(pp - s, m) forwards; then forwards and B's alternate as in 1F1B's steady state, in
// micro-batch order. When the pass due is not ready (its input or output gradient is not there,
// or memory is full) the stage runs its oldest pending W instead, or waits when there is none;
// the W's left run at the end. With F = B = W this gives the paper's makespan m(F+B+W) +
// (pp-1)(F+B-W), a third of 1F1B's bubble. Ties between stages go to the lower stage.
std::vector<ComputeOrder> zero_bubble_h1_order(int pp, int microbatches,
                                               const PassCosts& costs = {});

// ZB-V (the paper's V-shaped schedule): two chunks per stage in the V placement (Placement::V:
// chunk 0 of stage s is virtual stage s, chunk 1 is 2 pp - 1 - s), each pass through a chunk
// half a stage's. Every stage holds at most 2 min(pp, m) chunk activations until their W (1F1B's
// peak memory); a new micro-batch's forward (chunk 0) leaves room for one chunk-1 forward, so
// the oldest micro-batch can always reach the loss. Whenever free a stage runs, in this order,
// the oldest ready B (chunk 1 first), a chunk-1 forward, a chunk-0 forward, its oldest pending
// W; otherwise it waits. With F = B = W the bubble is about (pp - 1) W / 2 per stage.
std::vector<ComputeOrder> zero_bubble_v_order(int pp, int microbatches,
                                              const PassCosts& costs = {});

// A stage's list from its compute order: each receive right before the compute that consumes
// it, each send right after the compute that produces it (none between two virtual stages of
// this stage). The sends must not wait for their receives (Schedule::buffered_sends): the order
// follows a feasible timeline, so then every receive's send has been posted by the time a rank
// waits for it.
std::vector<Action> with_point_to_point(int pp, int stage, const ComputeOrder& order,
                                        Placement placement = Placement::Interleaved, int vpp = 1);

// The whole pipeline of per-stage compute orders (one per stage), with their sends and receives
// (with_point_to_point): buffered sends.
Schedule buffered_pipeline(ScheduleKind kind, int pp, int microbatches, int vpp,
                           Placement placement, const std::vector<ComputeOrder>& orders);

// The whole ZB-H1 pipeline (pp >= 2; m >= 1).
Schedule zero_bubble_h1(int pp, int microbatches, const PassCosts& costs = {});
// The whole ZB-V pipeline (pp >= 2; m >= 1; vpp 2 in the V placement).
Schedule zero_bubble_v(int pp, int microbatches, const PassCosts& costs = {});

}  // namespace megatron::pipeline
