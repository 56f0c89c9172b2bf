// Hand-solved cases for the exact solver and the equal-share heuristic, node identities, goals.
#include <gtest/gtest.h>

#include "alloc_test_util.h"
#include "bft/alloc.h"
#include "bft/milp.h"

namespace bft::alloc {
namespace {

using testing::Counts;
using testing::FreshPool;
using testing::MakeJob;
using testing::SatisfiesConstraints;
using testing::With;

TEST(AllocExact, PicksTheBetterMarginalValue) {
  // a: 10/node up to 4; b: 15/node up to 2. Four nodes: b takes 2 (30), a takes 2 (20): 10 * 50.
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40}), MakeJob("b", 1, 2, {1, 2}, {15, 30})}, 4);
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(a.objective, 500.0);
  EXPECT_EQ(a.status, AllocationStatus::kOptimal);
  EXPECT_EQ(a.solver, "exact");
  EXPECT_EQ(a.jobs[1].rate, 30.0);
  EXPECT_EQ(a.jobs[1].value, 30.0);
}

TEST(AllocExact, HandlesNonConcaveValues) {
  // a is worth 1 at one node but 100 at four (convex); b is linear, 20/node. All four to a beats
  // any split (a3 + b1 = 67 + 20); the equal share gives a2 + b2 = 34 + 40.
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {1, 100}), MakeJob("b", 1, 4, {1, 4}, {20, 80})}, 4);
  const Allocation exact = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, exact));
  EXPECT_EQ(Counts(exact), (std::vector<int>{4, 0}));
  EXPECT_DOUBLE_EQ(exact.objective, 1000.0);
  const Allocation equal = Solve(p, With("equal_share"));
  EXPECT_TRUE(SatisfiesConstraints(p, equal));
  EXPECT_EQ(Counts(equal), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(equal.objective, 740.0);
  EXPECT_NE(equal.status, AllocationStatus::kOptimal);
}

TEST(AllocEqualShare, TheReferenceRuleGivesAShareOnlyAboveTheMinimum) {
  // Three nodes, two jobs: the share is 1. libbft's rule gives each its share and the leftover to
  // the first; the published replayer's gives no share equal to min_nodes, so all three go to the
  // first job as leftovers. With four nodes (share 2 > 1) the rules agree.
  auto jobs = [] {
    return std::vector<Job>{MakeJob("a", 1, 4, {1, 4}, {10, 40}), MakeJob("b", 1, 4, {1, 4}, {10, 40})};
  };
  SolveOptions reference = With("equal_share");
  reference.equal_share_above_min = true;
  EXPECT_EQ(Counts(Solve(FreshPool(jobs(), 3), With("equal_share"))), (std::vector<int>{2, 1}));
  const Problem three = FreshPool(jobs(), 3);
  const Allocation a = Solve(three, reference);
  EXPECT_TRUE(SatisfiesConstraints(three, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{3, 0}));
  EXPECT_EQ(Counts(Solve(FreshPool(jobs(), 4), reference)), (std::vector<int>{2, 2}));
}

TEST(AllocExact, RescalePenaltyKeepsARunningJobInPlace) {
  // a runs on 2 nodes at 10/node; growing to 4 would earn 10 * 40 - 30 * 20 = -200 < 10 * 20.
  // b (new, 1/node) takes the two free nodes: 200 + 20.
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40}, 30, 5), MakeJob("b", 1, 4, {1, 4}, {1, 4})}, 4);
  p.current = {{100, "a"}, {101, "a"}};
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(a.objective, 220.0);
  EXPECT_EQ(a.jobs[0].kept, (std::vector<NodeId>{100, 101}));
  EXPECT_EQ(a.jobs[1].added, (std::vector<NodeId>{102, 103}));
  EXPECT_EQ(a.jobs[0].penalty, 0.0);
}

TEST(AllocExact, ShrinkPenaltyIsCharged) {
  // a on 4 nodes (value 40), b new and 5x more valuable per node. Moving 2 nodes to b:
  // 10*(20 + 100) - 3*40 = 1080 > staying: 10*40 = 400.
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40}, 0, 3), MakeJob("b", 2, 2, {2}, {100})}, 4);
  p.current = {{100, "a"}, {101, "a"}, {102, "a"}, {103, "a"}};
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(a.objective, 1080.0);
  EXPECT_DOUBLE_EQ(a.jobs[0].penalty, 120.0);
  // The shrinking job keeps its lowest-numbered nodes; the grower takes the released ones.
  EXPECT_EQ(a.jobs[0].kept, (std::vector<NodeId>{100, 101}));
  EXPECT_EQ(a.jobs[0].released, (std::vector<NodeId>{102, 103}));
  EXPECT_EQ(a.jobs[1].added, (std::vector<NodeId>{102, 103}));
}

TEST(AllocExact, StoppingARunningJobPaysItsRestart) {
  // a runs on both nodes (20); b (30 on 2 nodes) would earn more: 10 * 30 - 1 * 20 = 280 > 10 * 20.
  // With a's cold restart (restart_s 10) charged, stopping it costs (1 + 10) * 20: 300 - 220 < 200.
  Problem p = FreshPool({MakeJob("a", 2, 2, {2}, {20}, 0, 1), MakeJob("b", 2, 2, {2}, {30})}, 2);
  p.current = {{100, "a"}, {101, "a"}};
  Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{0, 2}));
  EXPECT_DOUBLE_EQ(a.objective, 280.0);
  EXPECT_DOUBLE_EQ(a.jobs[0].penalty, 20.0);
  p.jobs[0].restart_s = 10.0;
  a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{2, 0}));
  EXPECT_DOUBLE_EQ(a.objective, 200.0);
  // A shrink that keeps it running pays no restart: a on 4 of 4 nodes gives 2 to b.
  Problem q = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40}, 0, 3), MakeJob("b", 2, 2, {2}, {100})}, 4);
  q.jobs[0].restart_s = 1000.0;
  q.current = {{100, "a"}, {101, "a"}, {102, "a"}, {103, "a"}};
  a = Solve(q);
  EXPECT_EQ(Counts(a), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(a.jobs[0].penalty, 120.0);
}

TEST(AllocExact, JobBelowMinAfterPreemptionPaysNoPenalty) {
  // a needs 4 nodes; preemption left it 2 (not running: rate 0, so growing costs nothing).
  Problem p = FreshPool({MakeJob("a", 4, 4, {4}, {40}, 1000, 1000)}, 4);
  p.current = {{102, "a"}, {103, "a"}};
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{4}));
  EXPECT_DOUBLE_EQ(a.objective, 400.0);
  EXPECT_EQ(a.jobs[0].penalty, 0.0);
  EXPECT_EQ(a.jobs[0].kept, (std::vector<NodeId>{102, 103}));
  EXPECT_EQ(a.jobs[0].added, (std::vector<NodeId>{100, 101}));
}

TEST(AllocExact, JobAboveItsMaxShrinks) {
  Problem p = FreshPool({MakeJob("a", 1, 2, {1, 2}, {10, 20})}, 4);
  p.current = {{103, "a"}, {100, "a"}, {102, "a"}};
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(a.jobs[0].kept, (std::vector<NodeId>{100, 102}));
  EXPECT_EQ(a.jobs[0].released, (std::vector<NodeId>{103}));
}

TEST(AllocExact, WeightsShiftNodes) {
  Problem p =
      FreshPool({MakeJob("a", 1, 2, {1, 2}, {10, 20}), MakeJob("b", 1, 2, {1, 2}, {10, 20}, 0, 0, 2.0)}, 2);
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{0, 2}));
  EXPECT_DOUBLE_EQ(a.objective, 400.0);
}

TEST(AllocExact, MaxMinFairnessSharesNodes) {
  // Throughput gives a all four nodes; max-min gives 2 + 2 (both at half their value at max).
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {100, 400}), MakeJob("b", 1, 4, {1, 4}, {1, 4})}, 4);
  EXPECT_EQ(Counts(Solve(p)), (std::vector<int>{4, 0}));
  const Allocation fair = Solve(p, With("exact", Goal::kMaxMinFair));
  EXPECT_TRUE(SatisfiesConstraints(p, fair));
  EXPECT_EQ(Counts(fair), (std::vector<int>{2, 2}));
  EXPECT_DOUBLE_EQ(fair.min_normalized_value, 0.5);
  EXPECT_DOUBLE_EQ(fair.objective, 2020.0);
}

TEST(AllocExact, MaxMinFairnessThenThroughput) {
  // 5 nodes: the fair minimum is 0.5 (2 + 2); the fifth node goes where it is worth most (a).
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {100, 400}), MakeJob("b", 1, 4, {1, 4}, {1, 4})}, 5);
  const Allocation fair = Solve(p, With("exact", Goal::kMaxMinFair));
  EXPECT_TRUE(SatisfiesConstraints(p, fair));
  EXPECT_EQ(Counts(fair), (std::vector<int>{3, 2}));
}

// Curves six decades apart, the range where a first-phase MILP (maximise t with rows t O_j(max)
// spanning the curves) failed or was beaten (docs/alloc.md, "Numerical range"). The fair minimum comes
// from the exact threshold search and each job gets one bound in its own units: both formulations on
// every backend reach the exact solver's minimum and objective, and say where the threshold came from.
TEST(AllocMilp, MaxMinOverCurvesSixDecadesApartMatchesTheExactSolver) {
  Problem p =
      FreshPool({MakeJob("a", 1, 6, {1, 6}, {10, 40}), MakeJob("b", 1, 6, {1, 3, 6}, {1e6, 2.5e6, 3e6}),
                 MakeJob("c", 2, 6, {2, 6}, {1e3, 5e3}), MakeJob("d", 1, 4, {1, 4}, {3e7, 3.1e7})},
                9);
  const Allocation exact = Solve(p, With("exact", Goal::kMaxMinFair));
  ASSERT_EQ(exact.status, AllocationStatus::kOptimal);
  for (const std::string& backend : milp::RegisteredBackends()) {
    for (const std::string solver : {"count_milp", "node_milp"}) {
      SolveOptions options = With(solver, Goal::kMaxMinFair);
      options.milp_backend = backend;
      const Allocation a = Solve(p, options);
      EXPECT_TRUE(SatisfiesConstraints(p, a)) << backend << " " << solver;
      EXPECT_EQ(a.status, AllocationStatus::kOptimal) << backend << " " << solver << ": " << a.message;
      EXPECT_NEAR(a.min_normalized_value, exact.min_normalized_value, 1e-9) << backend << " " << solver;
      EXPECT_NEAR(a.objective, exact.objective, 1e-6 * std::abs(exact.objective)) << backend << " " << solver;
      EXPECT_NE(a.message.find("max-min threshold"), std::string::npos) << a.message;
    }
  }
}

// A backend that solves with GLPK but reports its solution as stopped by the time limit.
class ReportsTimeLimit final : public milp::Backend {
 public:
  std::string name() const override { return "glpk-reports-time-limit"; }
  milp::Result Solve(const milp::Model& model, const milp::SolveOptions& options) const override {
    milp::Result r = milp::Solve(model, "glpk", options);
    if (r.has_solution) {
      r.termination = milp::Termination::kTimeLimit;
      r.message = "time limit reached with a feasible solution";
    }
    return r;
  }
};

// A backend that fails with the termination it is given (an error, or a false "infeasible").
template <milp::Termination kHow>
class AlwaysFails final : public milp::Backend {
 public:
  std::string name() const override { return "always-fails"; }
  milp::Result Solve(const milp::Model& model, const milp::SolveOptions&) const override {
    milp::Result r;
    r.backend = name();
    r.model_id = model.id();
    r.termination = kHow;
    r.message = "injected failure";
    return r;
  }
};

TEST(AllocStatus, EachSolverReportsWhatItsAllocationIs) {
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {100, 400}), MakeJob("b", 1, 4, {1, 4}, {1, 4})}, 4);
  EXPECT_EQ(Solve(p, With("exact")).status, AllocationStatus::kOptimal);
  // The heuristic used to report termination kOptimal; its status says what it is.
  const Allocation equal = Solve(p, With("equal_share"));
  EXPECT_EQ(equal.status, AllocationStatus::kHeuristic);
  SolveOptions milp = With("count_milp");
  EXPECT_EQ(Solve(p, milp).status, AllocationStatus::kOptimal);
  // An incumbent at the time limit, under either goal: feasible, not proven.
  milp::RegisterBackend("glpk-reports-time-limit", [] { return std::make_unique<ReportsTimeLimit>(); });
  milp.milp_backend = "glpk-reports-time-limit";
  for (const Goal goal : {Goal::kThroughput, Goal::kMaxMinFair}) {
    milp.goal = goal;
    const Allocation stopped = Solve(p, milp);
    EXPECT_EQ(stopped.status, AllocationStatus::kTimeLimit) << stopped.message;
    EXPECT_TRUE(SatisfiesConstraints(p, stopped));
  }
  // No solution at all (a backend error): every job keeps its nodes, the allocation says it failed.
  milp::RegisterBackend("always-fails",
                        [] { return std::make_unique<AlwaysFails<milp::Termination::kError>>(); });
  milp.goal = Goal::kThroughput;
  milp.milp_backend = "always-fails";
  const Allocation failed = Solve(p, milp);
  EXPECT_EQ(failed.status, AllocationStatus::kFailed) << failed.message;
  EXPECT_TRUE(SatisfiesConstraints(p, failed));
  // CBC has said "proven infeasible" of allocation problems, which always have a solution: failed,
  // and the message says the claim is wrong.
  milp::RegisterBackend("claims-infeasible",
                        [] { return std::make_unique<AlwaysFails<milp::Termination::kInfeasible>>(); });
  milp.milp_backend = "claims-infeasible";
  const Allocation refuted = Solve(p, milp);
  EXPECT_EQ(refuted.status, AllocationStatus::kFailed);
  EXPECT_NE(refuted.message.find("infeasibility is wrong"), std::string::npos) << refuted.message;
  EXPECT_STREQ(ToString(AllocationStatus::kHeuristic), "heuristic");
  EXPECT_STREQ(ToString(AllocationStatus::kFailed), "failed");
}

TEST(AllocExact, NoJobsAndEmptyPool) {
  Problem none = FreshPool({}, 5);
  const Allocation a = Solve(none);
  EXPECT_TRUE(a.jobs.empty());
  EXPECT_TRUE(a.map.empty());
  EXPECT_EQ(a.objective, 0.0);
  Problem empty = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40})}, 0);
  const Allocation b = Solve(empty);
  EXPECT_TRUE(SatisfiesConstraints(empty, b));
  EXPECT_EQ(Counts(b), (std::vector<int>{0}));
  for (const std::string s : {"equal_share"}) {
    EXPECT_TRUE(SatisfiesConstraints(none, Solve(none, With(s))));
    EXPECT_TRUE(SatisfiesConstraints(empty, Solve(empty, With(s))));
  }
}

TEST(AllocExact, MoreJobsThanNodes) {
  std::vector<Job> jobs;
  for (int j = 0; j < 5; ++j)
    jobs.push_back(MakeJob("j" + std::to_string(j), 1, 2, {1, 2}, {1.0 + j, 2.0 + 2 * j}));
  Problem p = FreshPool(jobs, 2);
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{0, 0, 0, 0, 2}));
  const Allocation fair = Solve(p, With("exact", Goal::kMaxMinFair));
  EXPECT_TRUE(SatisfiesConstraints(p, fair));
  EXPECT_EQ(fair.min_normalized_value, 0.0);
  EXPECT_EQ(Counts(fair), (std::vector<int>{0, 0, 0, 0, 2}));
}

TEST(AllocExact, JobWhoseMinExceedsThePoolStaysOut) {
  Problem p =
      FreshPool({MakeJob("big", 8, 16, {8, 16}, {800, 1600}), MakeJob("small", 1, 2, {1, 2}, {1, 2})}, 4);
  const Allocation a = Solve(p);
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{0, 2}));
}

TEST(AllocExact, ThroughputGivesTheRate) {
  Job job = MakeJob("a", 1, 4, {1, 4}, {1, 4});
  job.throughput = curve::ThroughputCurve({1, 4}, {100, 400});
  Problem p = FreshPool({job}, 3);
  const Allocation a = Solve(p);
  EXPECT_DOUBLE_EQ(a.jobs[0].value, 3.0);
  EXPECT_DOUBLE_EQ(a.jobs[0].rate, 300.0);
  p.jobs[0].throughput = curve::ThroughputCurve();  // empty: the objective stands in
  EXPECT_DOUBLE_EQ(Solve(p).jobs[0].rate, 3.0);
}

TEST(AllocEqualShare, SplitsEvenlyThenFirstComeFirstServed) {
  std::vector<Job> jobs;
  for (int j = 0; j < 3; ++j) jobs.push_back(MakeJob("j" + std::to_string(j), 1, 8, {8}, {8}));
  Problem p = FreshPool(jobs, 10);
  const Allocation a = Solve(p, With("equal_share"));
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{4, 3, 3}));
}

TEST(AllocEqualShare, JobsNeedingMoreThanTheShareGetLeftovers) {
  // Share 3; "big" needs 4 so it starts at 0; leftovers (10 - 3 - 3 = 4) go first to "a" (up to
  // its max 4), then the rest to "big" only if at least its min remains.
  Problem p = FreshPool(
      {MakeJob("a", 1, 4, {4}, {4}), MakeJob("big", 4, 8, {8}, {8}), MakeJob("c", 1, 3, {3}, {3})}, 10);
  const Allocation a = Solve(p, With("equal_share"));
  EXPECT_TRUE(SatisfiesConstraints(p, a));
  EXPECT_EQ(Counts(a), (std::vector<int>{4, 0, 3}));
  p.pool.push_back(500);
  p.pool.push_back(501);
  p.pool.push_back(502);  // 13 nodes, share 4: a 4, big 4, c 3, leftover 2 -> big 6
  EXPECT_EQ(Counts(Solve(p, With("equal_share"))), (std::vector<int>{4, 6, 3}));
}

TEST(AllocSolve, ReportsWallTimeAndMessage) {
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40})}, 4);
  const Allocation a = Solve(p);
  EXPECT_GE(a.wall_time_s, 0.0);
  EXPECT_FALSE(a.message.empty());
}

TEST(AllocSolve, OnlyMilpSolversReportATermination) {
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40})}, 4);
  for (const PolicyInfo& policy : Policies()) {
    const std::string& solver = policy.name;
    const Allocation a = Solve(p, With(solver));
    EXPECT_EQ(a.solver, solver);
    const bool milp = solver == "count_milp" || solver == "node_milp";
    EXPECT_EQ(milp, policy.solves_milp) << solver;
    EXPECT_EQ(a.termination.has_value(), milp) << solver;
    if (milp) {
      EXPECT_EQ(a.termination, milp::Termination::kOptimal) << solver;
    }
  }
}

TEST(AllocSolve, GoalNamesReadBack) {
  for (Goal goal : {Goal::kThroughput, Goal::kMaxMinFair}) EXPECT_EQ(GoalFromString(ToString(goal)), goal);
  EXPECT_THROW(GoalFromString("fastest"), InvalidArgument);
}

}  // namespace
}  // namespace bft::alloc
