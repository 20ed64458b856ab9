// DualPipeV (pipeline/dualpipe_v.h): the phase lists against a hand-checked small pipeline, every
// layout through the simulator (deadlock-free with buffered sends, every pass once, each W after
// its B, the peak of 2 pp + 1 chunk activations), its bubble against 1F1B's and ZB-V's, and the
// argument checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/pipeline/dualpipe_v.h"
#include "megatron/pipeline/simulator.h"

namespace megatron::pipeline {
namespace {

using ::testing::HasSubstr;

CostModel equal_passes() {  // F = B = W = 1 per stage (half that per chunk)
  CostModel c;
  c.forward_s = 1;
  c.backward_s = 2;
  c.weight_s = 1;
  return c;
}

int count(const std::vector<Action>& list, ActionKind kind, int chunk) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Action& a) {
    return a.kind == kind && a.chunk == chunk;
  }));
}

TEST(DualPipeV, TwoStagesFourMicrobatches) {
  const Schedule s = dualpipe_v(2, 4);
  EXPECT_EQ(s.kind, ScheduleKind::DualPipeV);
  EXPECT_EQ(s.placement, Placement::V);
  EXPECT_EQ(s.vpp, 2);
  EXPECT_TRUE(s.buffered_sends);
  // Stage 0: phase 1 two chunk-0 forwards, 2 one F/F pair, 3 B W F on chunk 1, 4 one
  // F0 & B1 / F1 & B0 round, 5 none, 6 one B1 B0 pair with its second B split, 7 W B0, 8 W.
  const auto order0 = dualpipe_v_order(2, 4)[0];
  EXPECT_EQ(format_actions(order0, true),
            "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 B2.0 W2.0 "
            "B3.0 W3.0");
  // Stage 1 (the V's turn: its chunk 0 feeds its chunk 1 without a message): phase 2 two F/F
  // pairs, 4 two rounds, 6 two pairs whose last two B's are split, 8 two W's.
  EXPECT_EQ(format_actions(s.ranks[1], true),
            "[RA0.0<-0] F0.0 F0.1 [SA0.1->0 RA1.0<-0] F1.0 F1.1 [SA1.1->0 RA2.0<-0] F2.0 "
            "[RG0.1<-0] B0.1 F2.1 [SA2.1->0] B0.0 [SG0.0->0 RA3.0<-0] F3.0 [RG1.1<-0] B1.1 F3.1 "
            "[SA3.1->0] B1.0 [SG1.0->0 RG2.1<-0] B2.1 B2.0 [SG2.0->0 RG3.1<-0] B3.1 B3.0 "
            "[SG3.0->0] W3.1 W3.0");
}

TEST(DualPipeV, EveryLayoutIsDeadlockFreeAtItsMemory) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 2 * pp; m <= 2 * pp + 12; ++m) {
      const Schedule s = dualpipe_v(pp, m);
      const SimulationResult r = simulate(s, equal_passes());
      ASSERT_TRUE(r.ok()) << "pp=" << pp << " m=" << m << "\n" << r.report();
      for (int st = 0; st < pp; ++st) {
        const auto& list = s.ranks[static_cast<size_t>(st)];
        for (int c : {0, 1}) {
          EXPECT_EQ(count(list, ActionKind::Forward, c), m);
          EXPECT_EQ(count(list, ActionKind::Backward, c), m);
        }
        // Split B's: phase 3's and 7's (pp - s - 1 each) and half of phase 6's 2 (s + 1).
        EXPECT_EQ(count(list, ActionKind::WeightGrad, 0) + count(list, ActionKind::WeightGrad, 1),
                  2 * (pp - st - 1) + st + 1)
            << "pp=" << pp << " m=" << m << " stage " << st;
        // 1F1B's pp micro-batches (2 pp chunk activations) plus one chunk: stage 0's peak.
        EXPECT_LE(r.peak_in_flight[static_cast<size_t>(st)], 2 * pp + 1)
            << "pp=" << pp << " m=" << m << " stage " << st;
      }
      EXPECT_EQ(r.peak_in_flight[0], 2 * pp + 1);
    }
}

TEST(DualPipeV, IsDeadlockFreeOnUnequalPassTimes) {
  for (const auto& [f, b, w] : {std::tuple{1.0, 3.0, 0.5}, {2.0, 2.0, 1.0}, {1.0, 4.0, 3.0}})
    for (int pp : {2, 3, 4, 6})
      for (int m : {2 * pp, 2 * pp + 3, 5 * pp}) {
        CostModel cost;
        cost.forward_s = f;
        cost.backward_s = b;
        cost.weight_s = w;
        for (const auto mode : {CostModel::SendMode::Buffered, CostModel::SendMode::Rendezvous}) {
          cost.send_mode = mode;  // buffered_sends schedules are simulated buffered either way
          const SimulationResult r = simulate(dualpipe_v(pp, m), cost);
          ASSERT_TRUE(r.ok()) << "pp=" << pp << " m=" << m << "\n" << r.report();
        }
      }
}

TEST(DualPipeV, BubbleMatchesZeroBubbleVsWithEqualPasses) {
  // With F = B = W every stage idles (pp - 1) half forwards: the makespan is 3m + (pp - 1) / 2,
  // the bound ZB-V reaches (the planner's model), and well under 0.3x 1F1B's bubble.
  for (int pp : {2, 3, 4, 8})
    for (int m : {2 * pp, 3 * pp, 24}) {
      const SimulationResult r = simulate(dualpipe_v(pp, m), equal_passes());
      ASSERT_TRUE(r.ok()) << r.report();
      EXPECT_DOUBLE_EQ(r.makespan_s, 3.0 * m + 0.5 * (pp - 1)) << "pp=" << pp << " m=" << m;
      const SimulationResult v =
          simulate(make_schedule(ScheduleKind::ZeroBubbleV, pp, m, 2), equal_passes());
      EXPECT_LE(r.makespan_s, v.makespan_s + 1e-9) << "pp=" << pp << " m=" << m;
      const SimulationResult base =
          simulate(make_schedule(ScheduleKind::OneFOneB, pp, m), equal_passes());
      EXPECT_LE(r.bubble_fraction, 0.3 * base.bubble_fraction) << "pp=" << pp << " m=" << m;
    }
}

TEST(DualPipeV, TooFewMicrobatchesIsAnInputErrorNamingTheMinimum) {
  EXPECT_THROW(dualpipe_v(1, 4), InputError);
  EXPECT_THROW(make_schedule(ScheduleKind::DualPipeV, 2, 4, 1), InputError);
  EXPECT_NO_THROW(make_schedule(ScheduleKind::DualPipeV, 2, 4, 2));
  try {
    dualpipe_v(4, 7);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("at least 2 * pp = 8 micro-batches with pp 4, got 7"));
  }
  EXPECT_EQ(std::string(schedule_kind_name(ScheduleKind::DualPipeV)), "dualpipe_v");
}

}  // namespace
}  // namespace megatron::pipeline
