// Pipeline-parallel schedules: Megatron's no-pipelining, 1F1B and interleaved 1F1B action lists
// (hand-checked examples), and, through the simulator, deadlock freedom, data dependencies,
// activation memory and bubble size over many layouts; the simulator's own error detection;
// timeline JSONL and SVG.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "megatron/core/error.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/simulator.h"
#include "megatron/pipeline/timeline.h"

namespace megatron::pipeline {
namespace {

using ::testing::HasSubstr;
using SendMode = CostModel::SendMode;

// Every valid (pp, m, vpp) of the sweep: pp 1..8, m 1..16, vpp 1..4.
struct Layout {
  int pp, m, vpp;
};
std::vector<Layout> sweep() {
  std::vector<Layout> out;
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m)
      for (int vpp = 1; vpp <= 4; ++vpp) {
        if (vpp > 1 && (pp == 1 || m % pp != 0)) continue;
        out.push_back({pp, m, vpp});
      }
  return out;
}

std::string name(const Layout& l) { return concat("pp=", l.pp, " m=", l.m, " vpp=", l.vpp); }

int forwards_before_first_backward(const std::vector<Action>& acts) {
  int n = 0;
  for (const Action& a : acts) {
    if (a.kind == ActionKind::Backward) break;
    if (a.kind == ActionKind::Forward) ++n;
  }
  return n;
}

// ---- hand-checked action lists ------------------------------------------------------------------

TEST(PipelineSchedule, NoPipeliningAlternatesForwardAndBackward) {
  EXPECT_EQ(format_actions(no_pipelining(3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(format_actions(one_f_one_b(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(format_actions(make_schedule(1, 2).ranks[0]), "F0 B0 F1 B1");
}

TEST(PipelineSchedule, OneFOneBTwoStagesThreeMicrobatches) {
  // Stage 0: one warm-up forward, then 1F1B, then one cool-down backward. Stage 1 (last): no
  // warm-up. Brackets are the batch_isend_irecv calls.
  EXPECT_EQ(format_actions(one_f_one_b(2, 0, 3)),
            "F0 [SA0->1] F1 [SA1->1 RG0<-1] B0 F2 [SA2->1 RG1<-1] B1 [RG2<-1] B2");
  EXPECT_EQ(format_actions(one_f_one_b(2, 1, 3)),
            "[RA0<-0] F0 B0 [SG0->0 RA1<-0] F1 B1 [SG1->0 RA2<-0] F2 B2 [SG2->0]");
}

TEST(PipelineSchedule, OneFOneBFourStagesTwoMicrobatchesIsAllWarmupOnEarlyStages) {
  // Stage 0 would warm up with 3 forwards but there are only 2.
  EXPECT_EQ(format_actions(one_f_one_b(4, 0, 2)), "F0 [SA0->1] F1 [SA1->1 RG0<-1] B0 [RG1<-1] B1");
  // Stage 2 of 4: one warm-up forward.
  EXPECT_EQ(format_actions(one_f_one_b(4, 2, 2)),
            "[RA0<-1] F0 [SA0->3 RA1<-1] F1 [SA1->3 RG0<-3] B0 [SG0->1 RG1<-3] B1 [SG1->1]");
}

TEST(PipelineSchedule, InterleavedTwoStagesFourMicrobatchesTwoChunks) {
  // Forward order (both ranks): mb.chunk 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1; backward order the
  // same micro-batches with chunks reversed. Stage 0 holds virtual stages 0 and 2, stage 1 holds
  // 1 and 3; activations of chunk 0 on stage 1 go to chunk 1 on stage 0 (ring). Warm-up: stage 0
  // (2-0-1)*2 + (2-1)*2 = 4 forwards, stage 1 2 forwards. Rank 0 receives from rank 1 what
  // rank 1 produced pp - 1 = 1 iteration earlier.
  EXPECT_EQ(format_actions(interleaved_one_f_one_b(2, 0, 4, 2), true),
            "F0.0 [SA0.0->1] "
            "F1.0 [SA1.0->1 RA0.1<-1] "
            "F0.1 [SA0.1->1 RA1.1<-1] "
            "F1.1 [SA1.1->1 RG0.1<-1] "
            "F2.0 B0.1 [SA2.0->1 SG0.1->1 RG1.1<-1] "
            "F3.0 B1.1 [SA3.0->1 SG1.1->1 RA2.1<-1 RG0.0<-1] "
            "F2.1 B0.0 [SA2.1->1 RA3.1<-1 RG1.0<-1] "
            "F3.1 B1.0 [SA3.1->1 RG2.1<-1] "
            "B2.1 [SG2.1->1 RG3.1<-1] "
            "B3.1 [SG3.1->1 RG2.0<-1] "
            "B2.0 [RG3.0<-1] "
            "B3.0");
  EXPECT_EQ(format_actions(interleaved_one_f_one_b(2, 1, 4, 2), true),
            "[RA0.0<-0] "
            "F0.0 [SA0.0->0 RA1.0<-0] "
            "F1.0 [SA1.0->0 RA0.1<-0] "
            "F0.1 B0.1 [SG0.1->0 RA1.1<-0] "
            "F1.1 B1.1 [SG1.1->0 RA2.0<-0 RG0.0<-0] "
            "F2.0 B0.0 [SA2.0->0 SG0.0->0 RA3.0<-0 RG1.0<-0] "
            "F3.0 B1.0 [SA3.0->0 SG1.0->0 RA2.1<-0] "
            "F2.1 B2.1 [SG2.1->0 RA3.1<-0] "
            "F3.1 B3.1 [SG3.1->0 RG2.0<-0] "
            "B2.0 [SG2.0->0 RG3.0<-0] "
            "B3.0 [SG3.0->0]");
}

TEST(PipelineSchedule, InterleavedForwardOrderAndWarmupFollowMegatron) {
  for (const Layout& l : sweep()) {
    if (l.vpp == 1) continue;
    for (int s = 0; s < l.pp; ++s) {
      const auto acts = interleaved_one_f_one_b(l.pp, s, l.m, l.vpp);
      int k = 0, kb = 0;
      for (const Action& a : acts) {
        if (a.kind == ActionKind::Forward) {
          ASSERT_EQ(a.chunk, (k / l.pp) % l.vpp) << name(l) << " stage " << s << " forward " << k;
          ASSERT_EQ(a.microbatch, (k / (l.pp * l.vpp)) * l.pp + k % l.pp) << name(l);
          ++k;
        } else if (a.kind == ActionKind::Backward) {
          ASSERT_EQ(a.chunk, l.vpp - 1 - (kb / l.pp) % l.vpp) << name(l) << " backward " << kb;
          ASSERT_EQ(a.microbatch, (kb / (l.pp * l.vpp)) * l.pp + kb % l.pp) << name(l);
          ++kb;
        }
      }
      EXPECT_EQ(k, l.m * l.vpp);
      EXPECT_EQ(kb, l.m * l.vpp);
      const int warmup = std::min(l.m * l.vpp, (l.pp - s - 1) * 2 + (l.vpp - 1) * l.pp);
      // In the steady state each step runs its forward before its backward.
      EXPECT_EQ(forwards_before_first_backward(acts), warmup == l.m * l.vpp ? warmup : warmup + 1)
          << name(l) << " stage " << s;
    }
  }
}

TEST(PipelineSchedule, OneFOneBWarmup) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m)
      for (int s = 0; s < pp; ++s) {
        const int warmup = std::min(pp - s - 1, m);
        EXPECT_EQ(forwards_before_first_backward(one_f_one_b(pp, s, m)),
                  warmup == m ? m : warmup + 1);
      }
}

TEST(PipelineSchedule, BadArgumentsAreInputErrors) {
  EXPECT_THROW(one_f_one_b(0, 0, 4), InputError);
  EXPECT_THROW(one_f_one_b(4, 4, 4), InputError);
  EXPECT_THROW(one_f_one_b(4, -1, 4), InputError);
  EXPECT_THROW(one_f_one_b(4, 0, 0), InputError);
  EXPECT_THROW(no_pipelining(0), InputError);
  // Megatron: the interleaved schedule needs m to be a multiple of pp.
  try {
    interleaved_one_f_one_b(4, 0, 6, 2);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("multiple of the pipeline-parallel size"));
  }
  EXPECT_THROW(interleaved_one_f_one_b(1, 0, 4, 2), InputError);  // needs pp > 1
  EXPECT_THROW(interleaved_one_f_one_b(2, 0, 4, 0), InputError);
  EXPECT_THROW(interleaved_one_f_one_b(4, 0, 8, 2, 3), InputError);   // group < pp
  EXPECT_THROW(interleaved_one_f_one_b(4, 0, 8, 2, 9), InputError);   // group > m
  EXPECT_THROW(interleaved_one_f_one_b(4, 0, 10, 2, 8), InputError);  // 10 % 8 = 2 < pp
  EXPECT_NO_THROW(interleaved_one_f_one_b(4, 0, 10, 2, 6));           // 10 % 6 = 4 >= pp
  EXPECT_THROW(make_schedule(ScheduleKind::NoPipelining, 2, 4), InputError);
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 4, 2), InputError);
  // vpp = 1 is plain 1F1B.
  EXPECT_EQ(interleaved_one_f_one_b(3, 1, 5, 1), one_f_one_b(3, 1, 5));
  EXPECT_EQ(make_schedule(ScheduleKind::Interleaved, 3, 5, 1).kind, ScheduleKind::OneFOneB);
}

// ---- simulation over many layouts -------------------------------------------------------------

TEST(PipelineSimulator, EveryScheduleIsDeadlockFreeAndDependencyCorrect) {
  int checked = 0;
  for (const Layout& l : sweep()) {
    const Schedule s = make_schedule(l.pp, l.m, l.vpp);
    for (SendMode mode : {SendMode::Rendezvous, SendMode::Buffered}) {
      for (double p2p : {0.0, 0.3}) {
        CostModel cost;
        cost.send_mode = mode;
        cost.p2p_s = p2p;
        const SimulationResult r = simulate(s, cost);
        ASSERT_TRUE(r.ok()) << s.describe() << "\n" << r.report();
        ++checked;
      }
    }
    // Uneven costs too.
    const SimulationResult r = simulate(s, {1.0, 1.7, 0.05, SendMode::Rendezvous});
    ASSERT_TRUE(r.ok()) << s.describe() << "\n" << r.report();
  }
  EXPECT_EQ(sweep().size(), 206u);  // 128 of 1F1B / no pipelining, 78 interleaved
  EXPECT_EQ(checked, 4 * 206);
}

TEST(PipelineSimulator, EveryActionOfAScheduleIsNeeded) {
  // Dropping any single action of a generated schedule must be caught (deadlock, a missing
  // compute, or a message without its partner).
  for (const Layout& l : {Layout{4, 8, 1}, Layout{4, 8, 2}, Layout{3, 6, 3}, Layout{2, 5, 1}}) {
    const Schedule s = make_schedule(l.pp, l.m, l.vpp);
    ASSERT_TRUE(simulate(s).ok());
    for (int r = 0; r < l.pp; ++r)
      for (size_t i = 0; i < s.ranks[static_cast<size_t>(r)].size(); ++i) {
        Schedule t = s;
        auto& acts = t.ranks[static_cast<size_t>(r)];
        acts.erase(acts.begin() + static_cast<std::ptrdiff_t>(i));
        for (SendMode mode : {SendMode::Rendezvous, SendMode::Buffered})
          EXPECT_FALSE(simulate(t, {1.0, 2.0, 0.0, mode}).ok())
              << name(l) << ": dropping stage " << r << " action #" << i << " goes unnoticed";
      }
  }
}

TEST(PipelineSimulator, InterleavedWithMicrobatchGroupSizes) {
  for (int pp = 2; pp <= 4; ++pp)
    for (int m = pp; m <= 12; ++m)
      for (int group = pp; group <= m; ++group) {
        if (m % group != 0 && m % group < pp) continue;
        for (int vpp = 2; vpp <= 3; ++vpp) {
          const Schedule s = make_schedule(ScheduleKind::Interleaved, pp, m, vpp, group);
          const SimulationResult r = simulate(s);
          ASSERT_TRUE(r.ok()) << s.describe() << " group " << group << "\n" << r.report();
        }
      }
}

TEST(PipelineSimulator, OneFOneBHoldsAtMostPpMinusStageMicrobatches) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m) {
      const SimulationResult r = simulate(make_schedule(pp, m));
      ASSERT_TRUE(r.ok());
      for (int s = 0; s < pp; ++s)
        EXPECT_EQ(r.peak_in_flight[static_cast<size_t>(s)], std::min(pp - s, m))
            << "pp=" << pp << " m=" << m << " stage " << s;
    }
}

TEST(PipelineSimulator, OneFOneBBubbleIsPpMinusOneOverMPlusPpMinusOne) {
  // Makespan (m + pp - 1)(tf + tb); each stage is busy m (tf + tb): idle / total =
  // (pp - 1) / (m + pp - 1). Holds for any tf, tb with zero p2p time.
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m)
      for (double tb : {2.0, 1.0, 3.5}) {
        const SimulationResult r = simulate(make_schedule(pp, m), {1.0, tb, 0.0});
        ASSERT_TRUE(r.ok());
        EXPECT_NEAR(r.bubble_fraction, double(pp - 1) / (m + pp - 1), 1e-9)
            << "pp=" << pp << " m=" << m << " tb=" << tb;
        EXPECT_NEAR(r.makespan_s, (m + pp - 1) * (1.0 + tb), 1e-9);
      }
}

TEST(PipelineSimulator, InterleavedBubbleShrinksByVpp) {
  // Each chunk takes 1/vpp of the stage time t = tf + tb. The pipeline fills and drains in
  // (pp - 1) chunk steps: makespan = m t + (pp - 1) t / vpp, so idle / total =
  // (pp - 1) / (vpp m + pp - 1). Megatron's paper states the same bubble relative to the ideal
  // time m t: (pp - 1) / (vpp m) = x, and idle / total = x / (1 + x).
  for (const Layout& l : sweep()) {
    if (l.vpp == 1) continue;
    const SimulationResult r = simulate(make_schedule(l.pp, l.m, l.vpp), {1.0, 2.0, 0.0});
    ASSERT_TRUE(r.ok());
    const double expected = double(l.pp - 1) / (l.vpp * l.m + l.pp - 1);
    EXPECT_NEAR(r.bubble_fraction, expected, 1e-9) << name(l);
    const double x = double(l.pp - 1) / (l.vpp * l.m);
    EXPECT_NEAR(r.bubble_fraction, x / (1 + x), 1e-9) << name(l);
    EXPECT_NEAR(r.makespan_s, 3.0 * l.m + 3.0 * (l.pp - 1) / l.vpp, 1e-9) << name(l);
  }
}

TEST(PipelineSimulator, TimelineIsConsistent) {
  const Schedule s = make_schedule(4, 8, 2);
  const SimulationResult r = simulate(s, {1.0, 2.0, 0.1});
  ASSERT_TRUE(r.ok()) << r.report();
  int compute = 0;
  for (const TimelineEvent& e : r.timeline) {
    EXPECT_LE(e.start_s, e.end_s);
    if (is_compute(e.kind)) ++compute;
  }
  EXPECT_EQ(compute, 2 * 8 * 2 * 4);
  const TimelineStats st = timeline_stats(r.timeline);
  EXPECT_EQ(st.ranks, 4);
  EXPECT_EQ(st.chunks, 2);
  EXPECT_EQ(st.microbatches, 8);
  EXPECT_NEAR(st.makespan_s, r.makespan_s, 1e-12);
  EXPECT_NEAR(st.bubble_fraction, r.bubble_fraction, 1e-12);
  // Compute events of one rank never overlap.
  for (int rank = 0; rank < 4; ++rank) {
    double last_end = 0;
    for (const TimelineEvent& e : r.timeline)
      if (e.rank == rank && is_compute(e.kind)) {
        EXPECT_GE(e.start_s, last_end - 1e-12);
        last_end = e.end_s;
      }
  }
}

// ---- the simulator catches broken schedules -----------------------------------------------------

Action F(int mb, int c = 0) { return {ActionKind::Forward, mb, c, -1}; }
Action B(int mb, int c = 0) { return {ActionKind::Backward, mb, c, -1}; }
Action SA(int mb, int peer, int c = 0) { return {ActionKind::SendActivation, mb, c, peer}; }
Action RA(int mb, int peer, int c = 0) { return {ActionKind::RecvActivation, mb, c, peer}; }
Action SG(int mb, int peer, int c = 0) { return {ActionKind::SendGrad, mb, c, peer}; }
Action RG(int mb, int peer, int c = 0) { return {ActionKind::RecvGrad, mb, c, peer}; }

Schedule two_stages(std::vector<Action> r0, std::vector<Action> r1, int m = 1) {
  Schedule s;
  s.pp = 2;
  s.microbatches = m;
  s.ranks = {std::move(r0), std::move(r1)};
  return s;
}

TEST(PipelineSimulator, HandWrittenScheduleMatchesGenerator) {
  const Schedule s = two_stages({F(0), SA(0, 1), RG(0, 1), B(0)}, {RA(0, 0), F(0), B(0), SG(0, 0)});
  const SimulationResult r = simulate(s);
  ASSERT_TRUE(r.ok()) << r.report();
  EXPECT_EQ(s.ranks, make_schedule(2, 1).ranks);
  EXPECT_NEAR(r.makespan_s, 6.0, 1e-12);  // F0 F0 B0 B0 back to back
  EXPECT_NEAR(r.bubble_fraction, 0.5, 1e-12);
}

TEST(PipelineSimulator, DetectsDeadlockAndNamesStuckActions) {
  // Both stages receive first.
  const Schedule cycle =
      two_stages({RG(0, 1), F(0), SA(0, 1), B(0)}, {RA(0, 0), F(0), B(0), SG(0, 0)});
  for (SendMode mode : {SendMode::Rendezvous, SendMode::Buffered}) {
    const SimulationResult r = simulate(cycle, {1.0, 2.0, 0.0, mode});
    EXPECT_TRUE(r.deadlocked);
    EXPECT_FALSE(r.ok());
    ASSERT_EQ(r.stuck.size(), 2u) << r.report();
    EXPECT_THAT(r.stuck[0], HasSubstr("stage 0 stuck at action #0 of 4, batch [RG0<-1]"));
    EXPECT_THAT(r.stuck[0], HasSubstr("RG0<-1 waits for stage 1 to send it"));
    EXPECT_THAT(r.stuck[1], HasSubstr("RA0<-0 waits for stage 0 to send it"));
  }
}

TEST(PipelineSimulator, RendezvousIsStricterThanBuffered) {
  // pp 2, vpp 2: stage 0 holds virtual stages 0 and 2, stage 1 holds 1 and 3. Each stage sends,
  // computes, then receives what the other sent: stage 0 sends mb 2 (v0 -> v1), computes mb 3,
  // then receives mb 0 from v1; stage 1 sends mb 0 (v1 -> v2), computes mb 1, then receives
  // mb 2. A rendezvous send waits for its receive, which is behind the other stage's send.
  Schedule s;
  s.pp = 2;
  s.vpp = 2;
  s.microbatches = 4;
  s.ranks = {
      {F(0), F(1), SA(0, 1), SA(1, 1), F(2), SA(2, 1), F(3), RA(0, 1, 1), F(0, 1)},
      {RA(0, 0), RA(1, 0), F(0), SA(0, 0), F(1), RA(2, 0), F(2)},
  };
  const SimulationResult rv = simulate(s, {1.0, 2.0, 0.0, SendMode::Rendezvous});
  EXPECT_TRUE(rv.deadlocked);
  ASSERT_EQ(rv.stuck.size(), 2u) << rv.report();
  EXPECT_THAT(rv.stuck[0], HasSubstr("SA2.0->1 waits for stage 1 to receive it"));
  EXPECT_THAT(rv.stuck[1], HasSubstr("SA0.0->0 waits for stage 0 to receive it"));
  const SimulationResult bf = simulate(s, {1.0, 2.0, 0.0, SendMode::Buffered});
  EXPECT_FALSE(bf.deadlocked) << bf.report();
  EXPECT_THAT(bf.report(), HasSubstr("0 backwards"));  // (the fragment never runs backward)
}

TEST(PipelineSimulator, DetectsDependencyViolations) {
  {  // Backward before forward, forward without its input, send before compute.
    const Schedule s = two_stages({B(0), F(0), SA(0, 1)}, {F(0), RA(0, 0)});
    const SimulationResult r = simulate(s);
    EXPECT_FALSE(r.ok());
    EXPECT_THAT(r.report(), HasSubstr("backward before the forward"));
    EXPECT_THAT(r.report(), HasSubstr("forward before its input activation was received"));
  }
  {  // The last virtual stage has no next stage to receive a gradient from.
    const Schedule s = two_stages({F(0), SA(0, 1)}, {RA(0, 0), F(0), RG(0, 0), B(0)});
    EXPECT_THAT(simulate(s).report(), HasSubstr("virtual stage 1 has no next stage"));
  }
  {  // Wrong peer.
    Schedule s;
    s.pp = 3;
    s.microbatches = 1;
    s.ranks = {{F(0), SA(0, 2)}, {RA(0, 0), F(0)}, {F(0)}};
    EXPECT_THAT(simulate(s).report(), HasSubstr("peer should be stage 1"));
  }
  {  // A message sent and never received; a micro-batch never run backward.
    const Schedule s =
        two_stages({F(0), SA(0, 1), RG(0, 1), B(0)}, {RA(0, 0), F(0), B(0), SG(0, 0)}, 1);
    Schedule t = s;
    t.ranks[1] = {RA(0, 0), F(0), B(0)};  // no SG: stage 0 hangs
    EXPECT_TRUE(simulate(t).deadlocked);
    t.ranks[0] = {F(0), SA(0, 1)};  // stage 0 never runs backward
    const SimulationResult r = simulate(t);
    EXPECT_FALSE(r.deadlocked);
    EXPECT_THAT(r.report(),
                HasSubstr("micro-batch 0 virtual stage 0 (stage 0 chunk 0): 0 backwards"));
  }
  {  // Activations sent in one order and received in another.
    const Schedule s =
        two_stages({F(0), F(1), SA(0, 1), SA(1, 1), RG(0, 1), RG(1, 1), B(0), B(1)},
                   {RA(1, 0), RA(0, 0), F(0), F(1), B(0), B(1), SG(0, 0), SG(1, 0)}, 2);
    const SimulationResult r = simulate(s);
    EXPECT_FALSE(r.deadlocked);
    EXPECT_THAT(r.report(), HasSubstr("order: message #0 from stage 0 to stage 1 (activations)"));
  }
  {  // Buffered: a message sent but never received.
    const Schedule s = two_stages({F(0), SA(0, 1), B(0)}, {F(0), B(0)});
    const SimulationResult r = simulate(s, {1, 2, 0, SendMode::Buffered});
    EXPECT_THAT(r.report(), HasSubstr("sent but never received"));
  }
}

// ---- timeline files and pictures --------------------------------------------------------------

TEST(PipelineTimeline, JsonlRoundTrip) {
  const SimulationResult r = simulate(make_schedule(3, 6, 1), {1.0, 2.0, 0.25});
  std::stringstream ss;
  write_timeline_jsonl(ss, r.timeline);
  const auto back = read_timeline_jsonl(ss, "mem");
  EXPECT_EQ(back, r.timeline);
}

TEST(PipelineTimeline, MalformedLinesNameTheLine) {
  auto read = [](const std::string& text) {
    std::istringstream is(text);
    return read_timeline_jsonl(is, "t.jsonl");
  };
  const std::string good =
      R"({"rank":0,"kind":"forward","microbatch":1,"chunk":0,"start_s":0,"end_s":1.5})";
  EXPECT_EQ(read(good + "\n\n" + good + "\n").size(), 2u);
  // chunk defaults to 0
  EXPECT_EQ(read(R"({"rank":1,"kind":"backward","microbatch":2,"start_s":1,"end_s":2})")[0].chunk,
            0);
  auto fails_with = [&](const std::string& text, const std::string& what) {
    try {
      read(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(what)) << text;
    }
  };
  fails_with(good + "\n{not json", "t.jsonl:2: not valid JSON");
  fails_with("[1,2]", "t.jsonl:1: expected a JSON object");
  fails_with(R"({"kind":"forward","microbatch":1,"start_s":0,"end_s":1})",
             "missing field \"rank\"");
  fails_with(R"({"rank":0,"kind":"sideways","microbatch":1,"start_s":0,"end_s":1})",
             "unknown pipeline action kind 'sideways'");
  fails_with(R"({"rank":-1,"kind":"forward","microbatch":1,"start_s":0,"end_s":1})",
             "out of range");
  fails_with(R"({"rank":0,"kind":"forward","microbatch":"1","start_s":0,"end_s":1})",
             "\"microbatch\" must be an integer");
  fails_with(R"({"rank":0,"kind":"forward","microbatch":1,"start_s":2,"end_s":1})",
             "is before start_s");
  EXPECT_THROW(read_timeline_jsonl("/nonexistent/timeline.jsonl"), InputError);
}

TEST(PipelineTimeline, RecorderRecordsScopes) {
  TimelineRecorder rec(3);
  { auto s = rec.scope(ActionKind::Forward, 5, 1); }
  rec.record(ActionKind::SendActivation, 5, 1, 1.0, 2.0);
  ASSERT_EQ(rec.events().size(), 2u);
  EXPECT_EQ(rec.events()[0].rank, 3);
  EXPECT_EQ(rec.events()[0].kind, ActionKind::Forward);
  EXPECT_EQ(rec.events()[0].microbatch, 5);
  EXPECT_EQ(rec.events()[0].chunk, 1);
  EXPECT_LE(rec.events()[0].start_s, rec.events()[0].end_s);
  EXPECT_EQ(rec.events()[1].end_s, 2.0);
}

TEST(PipelineTimeline, SvgHasRowsBlocksLegendAndBubble) {
  const SimulationResult r = simulate(make_schedule(4, 8), {1.0, 2.0, 0.0});
  SvgOptions opt;
  opt.title = "1F1B <pp=4>";
  const std::string svg = render_timeline_svg(r.timeline, opt);
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(svg, HasSubstr("1F1B &lt;pp=4&gt;"));
  EXPECT_THAT(svg, HasSubstr("bubble 27.27%"));  // 3 / 11
  for (int s = 0; s < 4; ++s) EXPECT_THAT(svg, HasSubstr(concat(">stage ", s, "<")));
  EXPECT_THAT(svg, HasSubstr("forward (light)"));
  EXPECT_THAT(svg, HasSubstr("backward (dark)"));
  size_t blocks = 0;
  for (size_t p = svg.find("<title>"); p != std::string::npos; p = svg.find("<title>", p + 1))
    ++blocks;
  EXPECT_EQ(blocks, 2u * 8 * 4);
  EXPECT_THAT(render_timeline_svg({}), HasSubstr("</svg>"));
}

}  // namespace
}  // namespace megatron::pipeline
