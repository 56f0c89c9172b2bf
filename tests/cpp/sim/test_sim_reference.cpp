// The replay's reference accounting (the published BFTrainer replayer's rules, docs/sim.md), on
// cases computed by hand. tests/python/test_reference_accounting.py checks it against an
// independent oracle on Summit slices.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bft/sim.h"
#include "sim_test_util.h"

namespace bft::sim {
namespace {

using testing::MakeJob;

// Two nodes: b is reclaimed at 100 and idle again at 200; a is reclaimed at 300.
Trace TwoNodes() {
  return ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n300,a,busy\n");
}

ReplayOptions Reference(double start_s) {
  ReplayOptions o;
  o.accounting = Accounting::kReference;
  o.solve.solver = "equal_share";
  o.start_s = start_s;
  return o;
}

TEST(SimReference, EventsOnlyAtTraceTimesWithTheReferenceEqualShare) {
  // 0: q = 2 > min: 2 nodes, 18/s. 100: +1800; b reclaimed: -3 x 18 = 54; q = 1 is not > min, so
  // 0, and the leftover node tops the job up to 1 (no rescale). 200: +1000; q = 2: grown, charged
  // 5 x rate(1) = 50. 300: +1800; a reclaimed: -54; back to 1 node. The trace ends: the window too.
  const ReplayResult r = Replay(TwoNodes(), {MakeJob("j", 0, 1e6)}, Reference(0));
  const Summary& s = r.summary;
  EXPECT_EQ(s.accounting, "reference");
  EXPECT_DOUBLE_EQ(s.samples_done, 1800 - 54 + 1000 - 50 + 1800 - 54);
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 4600);
  EXPECT_DOUBLE_EQ(s.overhead_efficiency, 4442.0 / 4600.0);
  EXPECT_DOUBLE_EQ(s.idle_node_hours, 500.0 / 3600.0);
  EXPECT_DOUBLE_EQ(s.used_node_hours, 500.0 / 3600.0);
  EXPECT_EQ(s.rescales, 1);
  EXPECT_EQ(s.preemptions, 2);
  EXPECT_EQ(s.events, 4);
  EXPECT_EQ(s.end_s, 300);
  EXPECT_EQ(s.jobs_finished, 0);
}

TEST(SimReference, AJobFinishesOnceItsUncappedProgressLessThePreemptionChargeReachesItsWork) {
  // 100: 1,800 made, less the preemption's 54: 1,746 reach a work of 1,500, so the job finishes
  // there and every job is done: the window ends. The 246 made beyond the work are lost.
  const ReplayResult done = Replay(TwoNodes(), {MakeJob("j", 0, 1500)}, Reference(0));
  EXPECT_EQ(done.jobs[0].finish_s, 100);
  EXPECT_DOUBLE_EQ(done.jobs[0].done, 1500);
  EXPECT_DOUBLE_EQ(done.jobs[0].loss_samples, 54 + 246);
  EXPECT_DOUBLE_EQ(done.summary.samples_without_losses, 1800);
  EXPECT_DOUBLE_EQ(done.summary.overhead_efficiency, 1500.0 / 1800.0);
  EXPECT_EQ(done.summary.end_s, 100);
  EXPECT_EQ(done.summary.preemptions, 1);  // at the event that ends the window
  // A work of 1,780: 1,746 fall short at 100, so the job runs on 1 node (10/s) until 200, where
  // 2,746 complete it; 54 + 966 are lost.
  const ReplayResult r = Replay(TwoNodes(), {MakeJob("j", 0, 1780)}, Reference(0));
  const Summary& s = r.summary;
  EXPECT_EQ(r.jobs[0].finish_s, 200);
  EXPECT_DOUBLE_EQ(s.samples_done, 1780);
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 2800);
  EXPECT_DOUBLE_EQ(s.loss_samples, 54 + 966);
  EXPECT_EQ(s.end_s, 200);
  EXPECT_DOUBLE_EQ(s.makespan_s, 200);
  EXPECT_DOUBLE_EQ(s.mean_turnaround_s, 200);
  EXPECT_DOUBLE_EQ(s.idle_node_hours, 300.0 / 3600.0);
  EXPECT_DOUBLE_EQ(s.active_idle_capture, 1.0);
}

TEST(SimReference, EventsStopAtTheEventThatFinishesTheLastJob) {
  // The window ends at 200 with the last finish; a's change at 300 comes after it and is no event
  // (the published replayer leaves its loop there). Events: 0, 100 and 200, one step row each.
  const ReplayResult r = Replay(TwoNodes(), {MakeJob("j", 0, 1780)}, Reference(0));
  EXPECT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.summary.events, 3);
  // A change of a node outside the subset is no event: b alone finishes the job at 100.
  ReplayOptions o = Reference(0);
  o.nodes = {"b"};
  const ReplayResult b = Replay(TwoNodes(), {MakeJob("j", 0, 500)}, o);
  EXPECT_EQ(b.summary.end_s, 100);
  EXPECT_EQ(b.summary.events, 2);
}

TEST(SimReference, AJobSubmittedBetweenEventsWaitsForTheNextAndLossesMayTakeItBelowZero) {
  // Submitted at 50, admitted at 100 on node a (10/s); its 1,000 samples are done at 200, where
  // it finishes; makespan from the window start, turnaround from the submit.
  const ReplayResult r = Replay(TwoNodes(), {MakeJob("late", 50, 1000)}, Reference(0));
  EXPECT_EQ(r.jobs[0].admit_s, 100);
  EXPECT_EQ(r.jobs[0].finish_s, 200);
  EXPECT_DOUBLE_EQ(r.summary.makespan_s, 200);
  EXPECT_DOUBLE_EQ(r.summary.mean_turnaround_s, 150);
  // A loss larger than the samples done is taken in full: the samples done go below zero (no debt).
  const Trace flaky = ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n1,b,busy\n2,a,busy\n3,a,idle\n");
  const ReplayResult f = Replay(flaky, {MakeJob("j", 0, 1e6)}, Reference(0));
  EXPECT_DOUBLE_EQ(f.jobs[0].done, 18 - 54 + 10 - 30);
  EXPECT_DOUBLE_EQ(f.jobs[0].unpaid_loss_samples, 0.0);
  EXPECT_DOUBLE_EQ(f.summary.loss_samples, 54 + 30);
  EXPECT_DOUBLE_EQ(f.summary.samples_done, 18 - 54 + 10 - 30);
}

TEST(SimReference, TheWindowStartsAtTheThousandthDistinctTimeWithItsState) {
  // One node toggling every second from 0 to 1,000: the 1,000th distinct time is 999 (busy then).
  std::string text = "time,node,state\n";
  for (int t = 0; t <= 1000; ++t) text += std::to_string(t) + ",x," + (t % 2 == 0 ? "idle" : "busy") + "\n";
  ReplayOptions o = Reference(0);
  o.start_s.reset();
  const ReplayResult r = Replay(ParseTrace(text), {MakeJob("j", 0, 1e6)}, o);
  EXPECT_EQ(r.summary.start_s, 999);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].idle_nodes, 0);
  EXPECT_EQ(r.steps[1].time_s, 1000);
  EXPECT_EQ(r.steps[1].used_nodes, 1);
  const std::string error = [&] {
    try {
      Replay(TwoNodes(), {MakeJob("j", 0, 1e6)}, o);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(error.find("the trace has only 4 (give start_s)"), std::string::npos) << error;
}

TEST(SimReference, ASubsetMayNameNodesTheTraceNeverFrees) {
  ReplayOptions o = Reference(0);
  o.nodes = {"a", "never-idle"};
  const ReplayResult r = Replay(TwoNodes(), {MakeJob("j", 0, 1e6)}, o);
  EXPECT_EQ(r.summary.nodes, 2);
  EXPECT_DOUBLE_EQ(r.summary.idle_node_hours, 300.0 / 3600.0);
  o.accounting = Accounting::kContinuous;
  EXPECT_THROW(Replay(TwoNodes(), {MakeJob("j", 0, 1e6)}, o), InvalidArgument);
  EXPECT_EQ(AccountingFromString("reference"), Accounting::kReference);
  EXPECT_THROW(AccountingFromString("published"), InvalidArgument);
}

TEST(SimIdleLifetime, PredictsTheMeanResidualLifeOfTheHolesSeen) {
  IdleLifetimePredictor p(/*prior_s=*/600.0, /*min_holes=*/3);
  p.ObserveHole(100);
  EXPECT_EQ(p.ExpectedRemaining(0), 600.0);  // fewer than 3 holes: the prior
  p.ObserveHole(1000);
  p.ObserveHole(10000);
  EXPECT_EQ(p.holes(), 3);
  EXPECT_DOUBLE_EQ(p.ExpectedRemaining(0), (100 + 1000 + 10000) / 3.0);
  // Idle for 500 s: only the 1,000 and 10,000 s holes lasted longer; 5,500 - 500 s remain.
  EXPECT_DOUBLE_EQ(p.ExpectedRemaining(500), 5500 - 500);
  EXPECT_DOUBLE_EQ(p.ExpectedRemaining(5000), 5000);          // only the 10,000 s hole
  EXPECT_DOUBLE_EQ(p.ExpectedRemaining(20000), 20000);        // longer than any: as long again
  EXPECT_THROW(IdleLifetimePredictor(0.5), InvalidArgument);  // a prior below 1 s
}

}  // namespace
}  // namespace bft::sim
