// The replay engine: accounting computed by hand, invariants, windows, subsets, FCFS admission.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "bft/milp.h"
#include "bft/sim.h"
#include "sim_test_util.h"

namespace bft::sim {
namespace {

using testing::CheckInvariants;
using testing::MakeJob;
using testing::Options;
using testing::PolicyOptions;
using testing::TinyTrace;

TEST(SimReplay, TinyTraceMatchesTheAccountingComputedByHand) {
  // t in [0,100): 2 nodes at 18/s -> 1800. At 100 b is reclaimed: preemption loss 3 s x 18/s = 54.
  // [100,200): 1 node at 10/s -> +1000. At 200 the exact allocator grows the job to 2 nodes
  // (10 s x 18 - 5 s x 10 = 130 > 10 s x 10 = 100): rescale loss 5 s x 10/s = 50. [200,300): +1800.
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, Options(300));
  const Summary& s = r.summary;
  EXPECT_DOUBLE_EQ(s.samples_done, 1800 - 54 + 1000 - 50 + 1800);
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 1800 + 1000 + 1800);
  EXPECT_DOUBLE_EQ(s.loss_samples, 104);
  EXPECT_DOUBLE_EQ(s.overhead_efficiency, 4496.0 / 4600.0);
  EXPECT_DOUBLE_EQ(s.idle_node_hours, 500.0 / 3600.0);
  EXPECT_DOUBLE_EQ(s.used_node_hours, 500.0 / 3600.0);
  EXPECT_DOUBLE_EQ(s.idle_capture, 1.0);
  EXPECT_EQ(s.rescales, 1);
  EXPECT_EQ(s.preemptions, 1);
  EXPECT_EQ(s.jobs_finished, 0);
  EXPECT_EQ(s.jobs_admitted, 1);
  EXPECT_EQ(s.allocator_calls, 3);
  EXPECT_EQ(s.nodes, 2);
  // Step log: events at 0, 100, 200 and the closing row at 300.
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[0].used_nodes, 2);
  EXPECT_EQ(r.steps[1].time_s, 100);
  EXPECT_EQ(r.steps[1].idle_nodes, 1);
  EXPECT_EQ(r.steps[1].preemptions, 1);
  EXPECT_EQ(r.steps[1].transitions, 1);
  EXPECT_DOUBLE_EQ(r.steps[1].samples_done, 1746);
  EXPECT_DOUBLE_EQ(r.steps[1].rate, 10);
  EXPECT_EQ(r.steps[2].rescales, 1);
  EXPECT_DOUBLE_EQ(r.steps[2].samples_done, 2696);
  EXPECT_EQ(r.steps[3].time_s, 300);
  EXPECT_DOUBLE_EQ(r.steps[3].samples_done, 4496);
  EXPECT_EQ(r.jobs[0].rescales, 1);
  EXPECT_EQ(r.jobs[0].preemptions, 1);
  EXPECT_DOUBLE_EQ(r.jobs[0].node_seconds, 500);
}

TEST(SimReplay, AReclaimThatStopsAJobChargesItsRestartWhenItRunsAgain) {
  // As above with min_nodes 2 and restart_s 7: the reclaim at 100 leaves the job below its minimum,
  // so it pays its shrink, 3 s x 18/s = 54; [100,200) it is stopped; at 200 it starts again on 2
  // nodes and pays its cold start at that rate, 7 s x 18/s = 126.
  JobSpec job = MakeJob("j", 0, 1e6);
  job.min_nodes = 2;
  job.restart_s = 7.0;
  const Summary s = Replay(TinyTrace(), {job}, Options(300)).summary;
  EXPECT_DOUBLE_EQ(s.samples_done, 1800 - 180 + 1800);
  EXPECT_DOUBLE_EQ(s.loss_samples, 180);
}

TEST(SimReplay, AStoppedJobPaysItsColdStartAtTheRateItRestartsAtAndOnlyIfItRestarts) {
  // Both nodes are reclaimed at 100 (shrink charged at 18/s: 54); only a comes back at 200, so the
  // job restarts on 1 node and pays restart_s 7 at 10/s: 70, not at the 18/s it ran at before the
  // stop. Without the return it never restarts and owes nothing more.
  JobSpec job = MakeJob("j", 0, 1e6);
  job.restart_s = 7.0;
  const std::string stop = "time,node,state\n0,a,idle\n0,b,idle\n100,a,busy\n100,b,busy\n";
  const Summary back = Replay(ParseTrace(stop + "200,a,idle\n"), {job}, Options(300)).summary;
  EXPECT_DOUBLE_EQ(back.loss_samples, 54 + 70);
  EXPECT_DOUBLE_EQ(back.samples_done, 1800 - 54 + 1000 - 70);
  const Summary gone = Replay(ParseTrace(stop), {job}, Options(300)).summary;
  EXPECT_DOUBLE_EQ(gone.loss_samples, 54);
}

TEST(SimReplay, TheAllocatorStopsARunningJobOnlyWhereItsRestartPays) {
  // j runs on both nodes (18/s). k arrives at 100 worth 30/s on 2 nodes: giving it j's nodes earns
  // 10 s x 30 - 3 s x 18 > 10 s x 18, so j is stopped (charged 54). With j's cold start charged
  // (restart_s 100: (3 + 100) x 18 = 1854 > 10 x (30 - 18)), j keeps its nodes and k waits.
  const Trace trace = ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n");
  JobSpec j = MakeJob("j", 0, 1e6);
  j.min_nodes = 2;
  JobSpec k = MakeJob("k", 100, 1e6);
  k.min_nodes = 2;
  k.throughput = k.objective = curve::ThroughputCurve({0, 1, 2}, {0.0, 15.0, 30.0});
  const ReplayResult stopped = Replay(trace, {j, k}, Options(300));
  EXPECT_DOUBLE_EQ(stopped.jobs[0].node_seconds, 200);
  EXPECT_DOUBLE_EQ(stopped.jobs[1].node_seconds, 400);
  EXPECT_DOUBLE_EQ(stopped.summary.loss_samples, 54);
  j.restart_s = 100.0;
  const ReplayResult kept = Replay(trace, {j, k}, Options(300));
  EXPECT_DOUBLE_EQ(kept.jobs[0].node_seconds, 600);
  EXPECT_DOUBLE_EQ(kept.jobs[1].node_seconds, 0);
  EXPECT_DOUBLE_EQ(kept.summary.loss_samples, 0);
}

TEST(SimReplay, AJobFinishingBetweenTraceEventsIsAnEvent) {
  // As above with work 3000: after the rescale at 200 the job has 2696 done and needs 304 more
  // at 18/s, so it finishes at 200 + 304/18 and its nodes sit idle afterwards.
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 3000)}, Options(300));
  const double finish = 200 + 304.0 / 18.0;
  EXPECT_EQ(r.summary.jobs_finished, 1);
  EXPECT_NEAR(r.jobs[0].finish_s, finish, 1e-9);
  EXPECT_DOUBLE_EQ(r.jobs[0].done, 3000);
  EXPECT_NEAR(r.summary.makespan_s, finish, 1e-9);
  EXPECT_NEAR(r.summary.mean_turnaround_s, finish, 1e-9);
  EXPECT_NEAR(r.summary.used_node_hours * 3600, 200 + 100 + 2 * (finish - 200), 1e-6);
  EXPECT_DOUBLE_EQ(r.summary.idle_node_hours * 3600, 500);
  EXPECT_NEAR(r.summary.samples_without_losses, 3000 + 104, 1e-6);
  ASSERT_EQ(r.steps.size(), 5u);
  EXPECT_NEAR(r.steps[3].time_s, finish, 1e-9);
  EXPECT_EQ(r.steps[3].finished_jobs, 1);
  EXPECT_EQ(r.steps[3].used_nodes, 0);
  // The job's progress curve ends at its finish with all its work done.
  ASSERT_FALSE(r.progress.empty());
  EXPECT_NEAR(r.progress.back().time_s, finish, 1e-9);
  EXPECT_DOUBLE_EQ(r.progress.back().done, 3000);
}

// b is reclaimed 1 s after the start: the preemption loss (3 s x 18/s = 54) exceeds the 18 samples
// done so far.
Trace EarlyReclaimTrace() {
  return ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n1,b,busy\n200,b,idle\n");
}

TEST(SimReplay, ALossLargerThanTheSamplesDoneIsChargedInFullFromLaterProgress) {
  // [0,1): 2 nodes at 18/s -> 18. At 1: loss 54 -> done 0, 36 owed. [1,200): 1 node at 10/s makes
  // 1990, of which 36 pay the debt -> 1954. At 200 the job grows (loss 5 s x 10/s = 50) -> 1904.
  // [200,300): +1800 -> 3704. Total charged 104 = the allocator's penalties.
  const ReplayResult r = Replay(EarlyReclaimTrace(), {MakeJob("j", 0, 1e6)}, Options(300));
  const Summary& s = r.summary;
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 18 + 1990 + 1800);
  EXPECT_DOUBLE_EQ(s.loss_samples, 54 + 50);
  EXPECT_DOUBLE_EQ(s.unpaid_loss_samples, 0);
  EXPECT_DOUBLE_EQ(s.samples_done, 3808 - 104);
  EXPECT_DOUBLE_EQ(s.overhead_efficiency, 3704.0 / 3808.0);
  EXPECT_EQ(s.preemptions, 1);
  EXPECT_EQ(s.rescales, 1);
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_DOUBLE_EQ(r.steps[1].samples_done, 0);
  EXPECT_DOUBLE_EQ(r.steps[2].samples_done, 1904);
  EXPECT_DOUBLE_EQ(r.jobs[0].loss_samples, 104);
}

TEST(SimReplay, ALossStillOwedAtTheEndOfTheWindowCountsInFull) {
  // As above, ending at 2: [1,2) makes 10 of the 36 owed; 26 stay unpaid, done stays 0.
  const ReplayResult r = Replay(EarlyReclaimTrace(), {MakeJob("j", 0, 1e6)}, Options(2));
  const Summary& s = r.summary;
  EXPECT_DOUBLE_EQ(s.samples_done, 0);
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 28);
  EXPECT_DOUBLE_EQ(s.loss_samples, 54);
  EXPECT_DOUBLE_EQ(s.unpaid_loss_samples, 26);
  EXPECT_DOUBLE_EQ(r.jobs[0].unpaid_loss_samples, 26);
  // 1 - 54/28: the allocations lost more than they made.
  EXPECT_DOUBLE_EQ(s.overhead_efficiency, (28.0 - 54.0) / 28.0);
}

TEST(SimReplay, AJobFinishesOnlyAfterPayingWhatItOwes) {
  // Work 100: at 1 the job has 0 done and owes 36; on 1 node at 10/s it needs 136 samples, so it
  // finishes at 1 + 13.6 (not at 1 + 10 as if the loss had been capped at the 18 done).
  const ReplayResult r = Replay(EarlyReclaimTrace(), {MakeJob("j", 0, 100)}, Options(300));
  EXPECT_NEAR(r.jobs[0].finish_s, 14.6, 1e-9);
  EXPECT_DOUBLE_EQ(r.jobs[0].done, 100);
  EXPECT_DOUBLE_EQ(r.jobs[0].loss_samples, 54);
  EXPECT_DOUBLE_EQ(r.jobs[0].unpaid_loss_samples, 0);
  EXPECT_NEAR(r.summary.samples_without_losses, 18 + 136, 1e-9);
  EXPECT_NEAR(r.summary.overhead_efficiency, 100.0 / 154.0, 1e-12);
}

TEST(SimReplay, AJobBelowItsMinimumReleasedToZeroIsNotARescale) {
  // min_nodes 2: at 100 b is reclaimed, the job keeps a alone (below its minimum: rate 0) and
  // pays the preemption (3 s x 18/s); the allocator releases a (0 or 2 nodes only): no rescale,
  // no charge. At 200 it restarts on 2 nodes from 0: no rescale either.
  JobSpec j = MakeJob("j", 0, 1e6);
  j.min_nodes = 2;
  const ReplayResult r = Replay(TinyTrace(), {j}, Options(300));
  EXPECT_EQ(r.summary.rescales, 0);
  EXPECT_EQ(r.jobs[0].rescales, 0);
  EXPECT_EQ(r.summary.preemptions, 1);
  EXPECT_DOUBLE_EQ(r.summary.loss_samples, 54);
  EXPECT_DOUBLE_EQ(r.summary.samples_done, 1800 - 54 + 1800);
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[1].used_nodes, 0);
  EXPECT_DOUBLE_EQ(r.jobs[0].node_seconds, 200 + 200);
}

TEST(SimReplay, OracleModeGivesTheAllocatorTheSpecsRescaleCosts) {
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, Options(300));
  EXPECT_EQ(r.jobs[0].allocator_scale_up_s, 5.0);
  EXPECT_EQ(r.jobs[0].allocator_scale_down_s, 3.0);
}

TEST(SimReplayLearned, TheAllocatorGetsTheMeasuredRescaleCostsOnceMeasured) {
  // Learned curves. The arrival at 50 (q0; never admitted: max_jobs 1) is a report: [0,50) is the
  // start's warm-up, [50,100) a steady interval at 2 nodes (18/s). At 100 b is reclaimed: the job
  // shrinks 2 -> 1 and loses 3 s x 18/s = 54 samples, 5.4 s at its new steady rate of 10/s. The
  // arrivals at 150 and 190 are reports: [100,150) is warm-up, [150,190) steady at 10/s, so the
  // advisor measures 54 samples lost, 54 / 18 = 3 s at the old size's measured rate: the allocation
  // at 220 gets the measured cost, the workload's 3 s. No grow was measured: scale_up_s stays 5 s.
  const Trace trace = ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n220,b,idle\n");
  ReplayOptions o = Options(250);
  o.curves = CurveMode::kLearned;
  o.max_jobs = 1;
  const std::vector<JobSpec> jobs = {MakeJob("j", 0, 1e9), MakeJob("q0", 50, 1), MakeJob("q1", 150, 1),
                                     MakeJob("q2", 190, 1)};
  const ReplayResult r = Replay(trace, jobs, o);
  EXPECT_EQ(r.jobs[0].preemptions, 1);
  EXPECT_NEAR(r.jobs[0].allocator_scale_down_s, 3.0, 1e-9);
  EXPECT_EQ(r.jobs[0].allocator_scale_up_s, 5.0);
  EXPECT_EQ(r.jobs[1].admit_s, -1);
  // Without the report at 50, 2 nodes were only ever warm-up: the advisor does not record that
  // shrink (it came before the start's overhead was measured), and the allocator keeps the
  // workload's 3 s. It used to record it against the rate at 2 nodes extrapolated linearly from
  // 1 node, 20/s instead of 18/s: 54 / 20 = 2.7 s, a cost the job never had.
  const ReplayResult unmeasured = Replay(trace, {jobs[0], jobs[2], jobs[3]}, o);
  EXPECT_EQ(unmeasured.jobs[0].preemptions, 1);
  EXPECT_EQ(unmeasured.jobs[0].allocator_scale_down_s, 3.0);
}

TEST(SimReplayLearned, ProgressRowsCarryTheTrueRateAndTheAdvisorsEstimate) {
  // At 0 the job starts on 2 nodes (18/s): nothing is measured yet, so every learned mode's
  // advisor estimates the prior, 1000/s per node; oracle mode has no advisor (0).
  for (const CurveMode mode :
       {CurveMode::kOracle, CurveMode::kLearned, CurveMode::kLearnedCurves, CurveMode::kLearnedCosts}) {
    ReplayOptions o = Options(300);
    o.curves = mode;
    const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o);
    EXPECT_EQ(r.summary.curves, ToString(mode));
    EXPECT_EQ(CurveModeFromString(ToString(mode)), mode);
    ASSERT_FALSE(r.progress.empty());
    EXPECT_EQ(r.progress[0].nodes, 2) << ToString(mode);
    EXPECT_DOUBLE_EQ(r.progress[0].rate, 18.0);
    EXPECT_DOUBLE_EQ(r.progress[0].estimate, mode == CurveMode::kOracle ? 0.0 : 2000.0) << ToString(mode);
  }
  EXPECT_THROW(CurveModeFromString("learned_everything"), InvalidArgument);
}

TEST(SimReplayLearned, AJobStartsFromWhatItsModelsEarlierJobsMeasured) {
  // max_jobs 1: j1 runs on 2 nodes from 0 (the arrivals at 50 and 100 are reports: [50,100) is a
  // steady interval at 18/s) and finishes at 150; j2, of the same model, is admitted then. Its
  // first estimate is j1's measured 18/s on 2 nodes, not the advisor's prior (2 x 1000/s).
  const Trace trace = ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n");
  ReplayOptions o = Options(400);
  o.curves = CurveMode::kLearned;
  o.max_jobs = 1;
  const std::vector<JobSpec> jobs = {MakeJob("j1", 0, 18 * 150), MakeJob("j2", 50, 1e6),
                                     MakeJob("q", 100, 1)};
  auto first_estimate_of_j2 = [&](std::vector<std::string> models) {
    o.models = std::move(models);
    const ReplayResult r = Replay(trace, jobs, o);
    EXPECT_NEAR(r.jobs[0].finish_s, 150, 1e-9);
    for (const JobProgress& p : r.progress)
      if (p.job == 1 && p.nodes > 0) return p.estimate;
    return -1.0;
  };
  EXPECT_NEAR(first_estimate_of_j2({"m", "m", ""}), 18.0, 1e-9);
  EXPECT_DOUBLE_EQ(first_estimate_of_j2({}), 2000.0);
  EXPECT_DOUBLE_EQ(first_estimate_of_j2({"m", "other", ""}), 2000.0);
  o.models = {"m"};
  EXPECT_THROW(Replay(trace, jobs, o), InvalidArgument);
}

TEST(SimReplayLearned, AHugeMaxNodesOnlyAsksTheAdvisorForTheReplaysNodes) {
  // max_nodes 10^9 on a 2-node trace: the learned curves are sized by the 2 nodes of the replay,
  // not by max_nodes (which used to ask the advisor for 10^9-point curves at every event).
  ReplayOptions o = Options(300);
  o.curves = CurveMode::kLearned;
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6, 1000000000)}, o);
  EXPECT_EQ(r.summary.allocator_calls, 3);
  EXPECT_GT(r.summary.samples_done, 0);
  EXPECT_EQ(r.summary.preemptions, 1);
}

TEST(SimReplay, MilpSolvesAreTimeLimitedAndIsolatedByDefault) {
  const ReplayOptions o;
  EXPECT_EQ(o.solve.milp.time_limit_s, kDefaultReplayMilpTimeLimitS);
  EXPECT_TRUE(std::isfinite(o.solve.milp.time_limit_s));
  EXPECT_TRUE(o.solve.milp.isolate);
}

TEST(SimReplay, InterruptStopsTheReplayBetweenEventsAndWithinSolves) {
  for (const std::string solver : {"exact", "node_milp"}) {
    int polls = 0;
    ReplayOptions o = Options(300);
    o.solve.solver = solver;
    o.solve.milp.interrupt = [&polls] { return ++polls >= 2; };
    EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o), Interrupted);
    EXPECT_GE(polls, 2);
  }
}

// Wraps GLPK and reports every solve with the termination `as` (keeping the solution only for a
// time limit), as a solver that hits its limit or fails would.
class Relabelled final : public milp::Backend {
 public:
  explicit Relabelled(milp::Termination as) : as_(as) {}
  std::string name() const override { return "relabelled"; }
  milp::Result Solve(const milp::Model& model, const milp::SolveOptions& options) const override {
    milp::Result r = milp::Solve(model, "glpk", options);
    r.termination = as_;
    if (as_ != milp::Termination::kTimeLimit) {
      r.has_solution = false;
      r.values.clear();
    }
    return r;
  }

 private:
  milp::Termination as_;
};

TEST(SimReplay, SummaryCountsMilpAllocationsStoppedByTheTimeLimitOrFailed) {
  ReplayOptions o = Options(300);
  o.solve.solver = "node_milp";
  o.solve.milp_backend = "glpk";
  const Summary clean = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o).summary;
  EXPECT_EQ(clean.allocator_time_limits, 0);
  EXPECT_EQ(clean.allocator_failures, 0);
  ASSERT_GT(clean.allocator_calls, 0);

  milp::RegisterBackend("relabelled-time-limit",
                        [] { return std::make_unique<Relabelled>(milp::Termination::kTimeLimit); });
  milp::RegisterBackend("relabelled-error",
                        [] { return std::make_unique<Relabelled>(milp::Termination::kError); });
  o.solve.milp_backend = "relabelled-time-limit";
  const Summary limited = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o).summary;
  EXPECT_EQ(limited.allocator_time_limits, limited.allocator_calls);
  EXPECT_EQ(limited.allocator_failures, 0);
  o.solve.milp_backend = "relabelled-error";
  const Summary failed = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o).summary;
  EXPECT_EQ(failed.allocator_failures, failed.allocator_calls);
  EXPECT_EQ(failed.allocator_time_limits, 0);
}

TEST(SimReplay, JobsThatArriveAfterTheWindowChangeNothing) {
  // The per-event totals are kept from the admitted jobs only (a step costs nothing per job that
  // has not arrived); they must equal the totals of the same replay without those jobs.
  std::vector<JobSpec> jobs = {MakeJob("j", 0, 3000), MakeJob("k", 50, 1e6)};
  const ReplayResult base = Replay(TinyTrace(), jobs, Options(300));
  for (int k = 0; k < 1000; ++k) jobs.push_back(MakeJob("late" + std::to_string(k), 1e9, 1e6));
  const ReplayResult more = Replay(TinyTrace(), jobs, Options(300));
  ASSERT_EQ(base.steps.size(), more.steps.size());
  for (std::size_t i = 0; i < base.steps.size(); ++i) {
    EXPECT_EQ(base.steps[i].samples_done, more.steps[i].samples_done) << "step " << i;
    EXPECT_EQ(base.steps[i].queued_jobs, more.steps[i].queued_jobs) << "step " << i;
    EXPECT_EQ(base.steps[i].finished_jobs, more.steps[i].finished_jobs) << "step " << i;
  }
  EXPECT_EQ(base.summary.samples_done, more.summary.samples_done);
  EXPECT_EQ(base.summary.jobs_finished, 1);
}

TEST(SimReplay, AdmitsFirstComeFirstServedUpToMaxJobs) {
  ReplayOptions o = Options(300);
  o.max_jobs = 1;
  // "late" is submitted first in time but listed second; "early" waits for it.
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("early", 10, 500), MakeJob("late", 5, 500)}, o);
  EXPECT_EQ(r.jobs[1].admit_s, 5);
  EXPECT_EQ(r.jobs[0].admit_s, r.jobs[1].finish_s);
  EXPECT_GT(r.jobs[0].finish_s, r.jobs[1].finish_s);
  EXPECT_EQ(r.summary.jobs_finished, 2);
  for (const Step& s : r.steps) EXPECT_LE(s.active_jobs, 1);
  // Its arrival at 10 is an event, and the step log shows it queued.
  ASSERT_GE(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[2].time_s, 10);
  EXPECT_EQ(r.steps[2].queued_jobs, 1);
  EXPECT_EQ(r.steps[2].allocator_s, 0.0);
}

TEST(SimReplay, WindowStartsFromTheTraceStateAndQueuesEarlierJobs) {
  ReplayOptions o = Options(250);
  o.start_s = 150;  // b is busy at 150 (reclaimed at 100), a idle since 0
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o);
  EXPECT_EQ(r.jobs[0].admit_s, 150);
  // [150,200): 1 node at 10/s = 500; at 200 grows (loss 50); [200,250): 2 nodes = 900.
  EXPECT_DOUBLE_EQ(r.summary.samples_done, 500 - 50 + 900);
  EXPECT_DOUBLE_EQ(r.summary.idle_node_hours * 3600, 50 + 100);
  EXPECT_EQ(r.summary.start_s, 150);
  EXPECT_EQ(r.summary.end_s, 250);
}

TEST(SimReplay, NodeSubsetOnlyOffersThoseNodes) {
  ReplayOptions o = Options(300);
  o.nodes = {"a"};
  const ReplayResult r = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o);
  EXPECT_EQ(r.summary.nodes, 1);
  EXPECT_DOUBLE_EQ(r.summary.samples_done, 3000);  // 1 node at 10/s for 300 s, no loss
  EXPECT_EQ(r.summary.preemptions, 0);
  EXPECT_DOUBLE_EQ(r.summary.idle_node_hours * 3600, 300);
  o.nodes = {"zz"};
  EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, o), InvalidArgument);
}

TEST(SimReplay, RejectsInvalidOptionsAndJobs) {
  ReplayOptions o = Options(300);
  o.max_jobs = 0;
  EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, 1)}, o), InvalidArgument);
  o = Options(300);
  o.start_s = 400;
  EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, 1)}, o), InvalidArgument);
  EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, 1), MakeJob("j", 0, 1)}, Options(300)), InvalidArgument);
  EXPECT_THROW(Replay(TinyTrace(), {MakeJob("j", 0, -1)}, Options(300)), InvalidArgument);
}

TEST(SimReplayInvariants, HoldOnSyntheticTracesUnderEveryPolicy) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SyntheticOptions so;
    so.seed = seed;
    so.nodes = 96;
    so.duration_s = 12 * 3600;
    so.mean_idle_nodes = 30;
    so.jobs = 14;
    const SyntheticWorkload w = GenerateSynthetic(so);
    for (const alloc::PolicyInfo& policy : alloc::Policies()) {
      if (policy.solves_milp) continue;  // slow
      const std::string& kind = policy.name;
      for (const Accounting accounting : {Accounting::kContinuous, Accounting::kReference}) {
        const ReplayOptions o = PolicyOptions(kind, accounting);
        const ReplayResult r = Replay(w.trace, w.jobs, o);
        SCOPED_TRACE("seed " + std::to_string(seed) + " " + kind + " " + ToString(accounting));
        CheckInvariants(w.trace, w.jobs, r);
        EXPECT_GT(r.summary.samples_done, 0);
        EXPECT_GT(r.summary.preemptions, 0);
        EXPECT_GT(r.summary.rescales, 0);
      }
    }
  }
}

TEST(SimReplayInvariants, NoNodeIsUsedAfterItsReclaim) {
  // Every busy transition of a node a job holds must come with a release at that time.
  SyntheticOptions so;
  so.nodes = 64;
  so.duration_s = 6 * 3600;
  so.mean_idle_nodes = 24;
  so.jobs = 8;
  const SyntheticWorkload w = GenerateSynthetic(so);
  ReplayOptions o;
  o.record_assignments = true;
  const ReplayResult r = Replay(w.trace, w.jobs, o);
  std::map<std::pair<double, NodeId>, int> releases;
  for (const AssignmentChange& a : r.assignments) {
    if (a.job < 0) ++releases[{a.time_s, a.node}];
  }
  std::vector<int> owner(w.trace.node_names.size(), -1);
  std::size_t k = 0;
  for (const Transition& x : w.trace.transitions) {
    for (; k < r.assignments.size() && r.assignments[k].time_s < static_cast<double>(x.time_s); ++k) {
      owner[static_cast<std::size_t>(r.assignments[k].node)] = r.assignments[k].job;
    }
    if (x.state == NodeState::kBusy && owner[static_cast<std::size_t>(x.node)] >= 0) {
      EXPECT_EQ((releases[{static_cast<double>(x.time_s), x.node}]), 1)
          << "node " << x.node << " reclaimed at " << x.time_s << " without being released";
    }
  }
}

TEST(SimSynthetic, SameSeedSameWorkloadDifferentSeedDifferent) {
  SyntheticOptions so;
  so.nodes = 64;
  so.duration_s = 86400;
  so.mean_idle_nodes = 20;
  const SyntheticWorkload a = GenerateSynthetic(so);
  const SyntheticWorkload b = GenerateSynthetic(so);
  so.seed = 2;
  const SyntheticWorkload c = GenerateSynthetic(so);
  ASSERT_EQ(a.trace.transitions.size(), b.trace.transitions.size());
  for (std::size_t k = 0; k < a.trace.transitions.size(); ++k) {
    EXPECT_EQ(a.trace.transitions[k].time_s, b.trace.transitions[k].time_s);
    EXPECT_EQ(a.trace.transitions[k].node, b.trace.transitions[k].node);
  }
  EXPECT_NE(a.trace.transitions.size(), c.trace.transitions.size());
  std::string error;
  EXPECT_TRUE(a.trace.IsValid(&error)) << error;
  EXPECT_TRUE(c.trace.IsValid(&error)) << error;
  ASSERT_EQ(a.jobs.size(), 48u);
  for (const JobSpec& j : a.jobs) EXPECT_TRUE(j.IsValid(&error)) << error;
}

TEST(SimSynthetic, TimeAverageOfIdleNodesIsNearTheTarget) {
  SyntheticOptions so;  // 512 nodes, 2 days, target 96 idle on average
  const SyntheticWorkload w = GenerateSynthetic(so);
  ReplayOptions o;
  o.end_s = so.duration_s;
  const ReplayResult r = Replay(w.trace, {}, o);
  const double mean_idle = r.summary.idle_node_hours * 3600 / so.duration_s;
  EXPECT_GT(mean_idle, 0.6 * so.mean_idle_nodes);
  EXPECT_LT(mean_idle, 1.4 * so.mean_idle_nodes);
}

}  // namespace
}  // namespace bft::sim
