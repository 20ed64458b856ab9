// Zero-bubble ZB-H1 (pipeline/zero_bubble.h): the greedy's lists through the simulator over many
// layouts (deadlock-free with buffered sends, every pass once, W after its B, 1F1B's activation
// memory), its bubble against 1F1B's and the paper's (p-1)(F+B-W), hand-checked small lists, and
// the simulator's W checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/pipeline/simulator.h"
#include "megatron/pipeline/timeline.h"
#include "megatron/pipeline/zero_bubble.h"

namespace megatron::pipeline {
namespace {

using ::testing::HasSubstr;

CostModel equal_passes() {  // F = B = W = 1, as the paper's analysis
  CostModel c;
  c.forward_s = 1;
  c.backward_s = 2;
  c.weight_s = 1;
  return c;
}

TEST(ZeroBubbleH1, TwoStagesThreeMicrobatches) {
  const Schedule s = zero_bubble_h1(2, 3);
  EXPECT_EQ(format_actions(s.ranks[0]),
            "F0 [SA0->1] F1 [SA1->1 RG0<-1] B0 W0 F2 [SA2->1 RG1<-1] B1 W1 [RG2<-1] B2 W2");
  // The last stage defers its W's by one micro-batch: its B's reach stage 0 sooner.
  EXPECT_EQ(format_actions(s.ranks[1]),
            "[RA0<-0] F0 B0 [SG0->0 RA1<-0] F1 B1 [SG1->0] W0 [RA2<-0] F2 B2 [SG2->0] W1 W2");
  EXPECT_TRUE(s.buffered_sends);
}

TEST(ZeroBubbleH1, EveryLayoutIsDeadlockFreeAtOneFOneBMemory) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 24; ++m) {
      const Schedule s = zero_bubble_h1(pp, m);
      const SimulationResult r = simulate(s, equal_passes());
      ASSERT_TRUE(r.ok()) << "pp=" << pp << " m=" << m << "\n" << r.report();
      const SimulationResult base = simulate(make_schedule(ScheduleKind::OneFOneB, pp, m));
      const int peak = *std::max_element(base.peak_in_flight.begin(), base.peak_in_flight.end());
      ASSERT_EQ(peak, std::min(pp, m));
      for (int st = 0; st < pp; ++st) {
        EXPECT_LE(r.peak_in_flight[static_cast<size_t>(st)], peak)
            << "pp=" << pp << " m=" << m << " stage " << st;
        int weights = 0;
        for (const Action& a : s.ranks[static_cast<size_t>(st)])
          weights += a.kind == ActionKind::WeightGrad;
        EXPECT_EQ(weights, m) << "pp=" << pp << " m=" << m << " stage " << st;
      }
    }
}

// A zero-bubble generator's lists, made and simulated on F/B/W times far from equal, are
// deadlock-free and dependency-correct.
void expect_ok_on_unequal_passes(Schedule (*make)(int, int, const PassCosts&),
                                 std::initializer_list<int> pps) {
  for (const PassCosts c : {PassCosts{1, 2, 0.5}, PassCosts{2, 1, 1}, PassCosts{1, 1, 3}})
    for (int pp : pps)
      for (int m : {1, 3, 8, 13}) {
        CostModel cost;
        cost.forward_s = c.forward;
        cost.backward_s = c.backward_input + c.weight;
        cost.weight_s = c.weight;
        const SimulationResult r = simulate(make(pp, m, c), cost);
        ASSERT_TRUE(r.ok()) << "pp=" << pp << " m=" << m << "\n" << r.report();
      }
}

TEST(ZeroBubbleH1, IsDeadlockFreeOnUnequalPassTimes) {
  expect_ok_on_unequal_passes(zero_bubble_h1, {2, 4, 5});
}

TEST(ZeroBubbleH1, BubbleIsAThirdOfOneFOneBs) {
  // The paper: 1F1B idles (p-1)(F+B+W) per stage, ZB-H1 (p-1)(F+B-W); with F = B = W that is a
  // third, so the bubble fraction falls below 0.4x of 1F1B's once m is large enough.
  for (int pp : {2, 4, 8})
    for (int m : {2 * pp, 3 * pp, 24}) {
      const SimulationResult zb = simulate(zero_bubble_h1(pp, m), equal_passes());
      const SimulationResult base =
          simulate(make_schedule(ScheduleKind::OneFOneB, pp, m), equal_passes());
      ASSERT_TRUE(zb.ok() && base.ok());
      EXPECT_DOUBLE_EQ(base.makespan_s, 3.0 * m + 3.0 * (pp - 1)) << "pp=" << pp << " m=" << m;
      EXPECT_DOUBLE_EQ(zb.makespan_s, 3.0 * m + 1.0 * (pp - 1)) << "pp=" << pp << " m=" << m;
      if (m >= 3 * pp) {
        EXPECT_LE(zb.bubble_fraction, 0.4 * base.bubble_fraction);
      }
    }
}

TEST(ZeroBubbleH1, BadArgumentsAreInputErrors) {
  EXPECT_THROW(zero_bubble_h1(1, 4), InputError);
  EXPECT_THROW(zero_bubble_h1(2, 0), InputError);
  EXPECT_THROW(zero_bubble_h1(2, 4, PassCosts{1, 0, 1}), InputError);
  EXPECT_THROW(zero_bubble_h1(2, 4, PassCosts{1, 1, -1}), InputError);
  EXPECT_THROW(make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2), InputError);
  try {
    zero_bubble_h1(2, 4, PassCosts{1, 1, 0});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("weight-gradient"));
  }
}

TEST(ZeroBubbleV, TwoStagesThreeMicrobatches) {
  const Schedule s = zero_bubble_v(2, 3);
  EXPECT_EQ(s.placement, Placement::V);
  EXPECT_EQ(s.vpp, 2);
  // Stage 0 holds virtual stages 0 and 3 (the loss), stage 1 virtual stages 1 and 2, handing
  // its chunk 0's output to its chunk 1 without a message.
  EXPECT_EQ(format_actions(s.ranks[0], true),
            "F0.0 [SA0.0->1] F1.0 [SA1.0->1] F2.0 [SA2.0->1 RA0.1<-1] F0.1 B0.1 [SG0.1->1] W0.1 "
            "[RA1.1<-1] F1.1 [RG0.0<-1] B0.0 B1.1 [SG1.1->1] W0.0 W1.1 [RG1.0<-1] B1.0 W1.0 "
            "[RA2.1<-1] F2.1 B2.1 [SG2.1->1] W2.1 [RG2.0<-1] B2.0 W2.0");
  EXPECT_EQ(format_actions(s.ranks[1], true),
            "[RA0.0<-0] F0.0 F0.1 [SA0.1->0 RA1.0<-0] F1.0 F1.1 [SA1.1->0 RG0.1<-0] B0.1 B0.0 "
            "[SG0.0->0] W0.1 W0.0 [RG1.1<-0] B1.1 B1.0 [SG1.0->0 RA2.0<-0] F2.0 F2.1 [SA2.1->0] "
            "W1.1 W1.0 [RG2.1<-0] B2.1 B2.0 [SG2.0->0] W2.1 W2.0");
}

TEST(ZeroBubbleV, EveryLayoutIsDeadlockFreeAtOneFOneBMemory) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 24; ++m) {
      const Schedule s = zero_bubble_v(pp, m);
      const SimulationResult r = simulate(s, equal_passes());
      ASSERT_TRUE(r.ok()) << "pp=" << pp << " m=" << m << "\n" << r.report();
      for (int st = 0; st < pp; ++st) {
        // Chunk activations, each half a stage's: 1F1B's peak of min(pp, m) micro-batches.
        EXPECT_LE(r.peak_in_flight[static_cast<size_t>(st)], 2 * std::min(pp, m))
            << "pp=" << pp << " m=" << m << " stage " << st;
        int weights = 0;
        for (const Action& a : s.ranks[static_cast<size_t>(st)])
          weights += a.kind == ActionKind::WeightGrad;
        EXPECT_EQ(weights, 2 * m);
      }
      // Stage pp - 1 cannot start before (pp - 1) half forwards: the makespan's lower bound.
      EXPECT_GE(r.makespan_s, 3.0 * m + 0.5 * (pp - 1) - 1e-9);
      if (m >= 2 * pp) {
        EXPECT_LE(r.makespan_s, 3.0 * m + 0.5 * (pp - 1) + 1.0) << "pp=" << pp << " m=" << m;
        const SimulationResult base =
            simulate(make_schedule(ScheduleKind::OneFOneB, pp, m), equal_passes());
        EXPECT_LE(r.bubble_fraction, 0.3 * base.bubble_fraction) << "pp=" << pp << " m=" << m;
      }
    }
}

TEST(ZeroBubbleV, IsDeadlockFreeOnUnequalPassTimes) {
  expect_ok_on_unequal_passes(zero_bubble_v, {2, 3, 4});
}

TEST(ZeroBubbleSimulator, VPlacementHasNoMessagesWithinAStage) {
  Schedule s = zero_bubble_v(2, 1);
  // A message from stage 1's chunk 0 to its own chunk 1 is refused.
  auto& list = s.ranks[1];
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == ActionKind::Forward && list[i].chunk == 0) {
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                  {ActionKind::SendActivation, 0, 0, 1});
      break;
    }
  EXPECT_THAT(simulate(s, equal_passes()).report(),
              HasSubstr("virtual stage 2 is on this stage: nothing to send"));
}

TEST(ZeroBubbleSimulator, DetectsWeightGradientsOutOfPlace) {
  Schedule s = make_schedule(ScheduleKind::NoPipelining, 1, 2);
  s.ranks[0] = {{ActionKind::Forward, 0},   {ActionKind::WeightGrad, 0},
                {ActionKind::Backward, 0},  {ActionKind::Forward, 1},
                {ActionKind::Backward, 1},  {ActionKind::WeightGrad, 1},
                {ActionKind::WeightGrad, 1}};
  const SimulationResult r = simulate(s, equal_passes());
  EXPECT_THAT(r.report(), HasSubstr("W0): weight gradient before its backward"));
  EXPECT_THAT(r.report(), HasSubstr("W1): weight gradient runs a second time"));
}

TEST(ZeroBubbleSimulator, SplitBackwardTakesItsShareAndHoldsMemoryUntilW) {
  Schedule s = make_schedule(ScheduleKind::NoPipelining, 1, 2);
  s.ranks[0] = {{ActionKind::Forward, 0},    {ActionKind::Backward, 0},
                {ActionKind::Forward, 1},    {ActionKind::Backward, 1},
                {ActionKind::WeightGrad, 0}, {ActionKind::WeightGrad, 1}};
  const SimulationResult r = simulate(s, equal_passes());
  ASSERT_TRUE(r.ok()) << r.report();
  EXPECT_DOUBLE_EQ(r.makespan_s, 6.0);  // 2 x (F 1 + B 1 + W 1)
  EXPECT_EQ(r.peak_in_flight[0], 2);    // micro-batch 0 held until its W
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.0);
}

TEST(ZeroBubbleTimeline, WeightPassesDrawnInTheirOwnShade) {
  const SimulationResult r = simulate(zero_bubble_h1(2, 3), equal_passes());
  const std::string svg = render_timeline_svg(r.timeline);
  EXPECT_THAT(svg, HasSubstr("weight gradients W (medium)"));
  EXPECT_THAT(svg, HasSubstr("<title>weight_grad micro-batch 2 chunk 0"));
  const std::string plain = render_timeline_svg(
      simulate(make_schedule(ScheduleKind::OneFOneB, 2, 3), equal_passes()).timeline);
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("weight gradients W")));
}

TEST(ZeroBubbleTimeline, RecordedStepsSplitAndPassTimesAverage) {
  const SimulationResult r = simulate(zero_bubble_h1(4, 8), equal_passes());
  std::vector<TimelineEvent> run = r.timeline;
  for (TimelineEvent e : r.timeline) {  // a second step after an optimizer gap of 5
    e.start_s += r.makespan_s + 5;
    e.end_s += r.makespan_s + 5;
    run.push_back(e);
  }
  const auto steps = split_steps(run);
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& step : steps) {
    EXPECT_EQ(step.size(), 3u * 4 * 8);  // compute events only
    const TimelineStats st = timeline_stats(step);
    EXPECT_DOUBLE_EQ(st.makespan_s, r.makespan_s);
    EXPECT_NEAR(st.bubble_fraction, r.bubble_fraction, 1e-12);
  }
  const PassTimes t = mean_pass_times(run);
  EXPECT_DOUBLE_EQ(t.forward_s, 1.0);
  EXPECT_DOUBLE_EQ(t.backward_s, 1.0);
  EXPECT_DOUBLE_EQ(t.weight_s, 1.0);
}

}  // namespace
}  // namespace megatron::pipeline
