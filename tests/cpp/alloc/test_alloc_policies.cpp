// The completion_aware and lifetime_aware policies: hand-solved cases where they must differ from
// the paper's optimum, node choice by expected idle time, and a differential test against brute
// force on the policies' objectives rebuilt here from their documented definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "alloc_test_util.h"
#include "bft/alloc.h"

namespace bft::alloc {
namespace {

using testing::Counts;
using testing::FreshPool;
using testing::MakeJob;
using testing::SatisfiesConstraints;
using testing::With;

// The policies' objectives, rebuilt from their definitions in bft/alloc.h (not from the library's
// code): the problem each policy solves exactly; its objective is the one an allocation reports.
Problem Reshaped(const Problem& p, const std::string& policy) {
  Problem r = p;
  double rate = 0.0;
  for (const double s : p.expected_idle_s) rate += 1.0 / s / static_cast<double>(p.expected_idle_s.size());
  for (Job& job : r.jobs) {
    std::vector<int> n;
    std::vector<double> v;
    std::vector<int> counts;  // every count the pool allows, and max_nodes (max-min's normaliser)
    for (int k = 0; k <= std::min<int>(job.max_nodes, static_cast<int>(p.pool.size())); ++k)
      counts.push_back(k);
    if (job.max_nodes > static_cast<int>(p.pool.size())) counts.push_back(job.max_nodes);
    for (const int k : counts) {
      double value = job.objective.Evaluate(k);
      if (policy == "completion_aware" && job.remaining_samples > 0) {
        value =
            std::min(value, value * job.remaining_samples / (job.objective.Evaluate(k) * p.tfwd_s + 1e-300));
      }
      if (policy == "lifetime_aware") value *= std::max(0.0, 1.0 - job.scale_down_s * rate);
      n.push_back(k);
      v.push_back(value);
    }
    if (policy == "completion_aware") {
      const int ref = std::min(job.max_nodes, job.objective.nodes().back());
      if (ref > 0 && job.objective.Evaluate(ref) > 0) job.weight *= ref / job.objective.Evaluate(ref);
    }
    job.objective = curve::ThroughputCurve(n, v);
  }
  return r;
}

TEST(AllocCompletionAware, ASlowModelIsNotStarvedInItsSlot) {
  // a scales sublinearly (100 at 1 node, 250 at 4), b is slow but linear (10 per node). The paper's
  // optimum gives a all four nodes (marginal 50 > 10). In node units (value / value at 4 nodes x 4)
  // a is worth 1.6 at 1 node then 0.8 per node, b 1 per node: a 1 node, b 3 (4.6 > 4.0).
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {100, 250}), MakeJob("b", 1, 4, {1, 4}, {10, 40})}, 4);
  EXPECT_EQ(Counts(Solve(p)), (std::vector<int>{4, 0}));
  const Allocation c = Solve(p, With("completion_aware"));
  EXPECT_TRUE(SatisfiesConstraints(Reshaped(p, "completion_aware"), c));
  EXPECT_EQ(Counts(c), (std::vector<int>{1, 3}));
  EXPECT_EQ(c.status, AllocationStatus::kOptimal);
  EXPECT_NEAR(c.objective, 10 * 4.6, 1e-9);
}

TEST(AllocCompletionAware, AJobAboutToFinishGetsOnlyWhatItCanUse) {
  // Both linear; a is faster, but only 100 samples from done: one node finishes it within the
  // 10 s horizon, so more nodes are worth nothing to it and b takes them.
  Problem p = FreshPool({MakeJob("a", 1, 4, {1, 4}, {10, 40}), MakeJob("b", 1, 4, {1, 4}, {9, 36})}, 4);
  p.jobs[0].remaining_samples = 100;
  EXPECT_EQ(Counts(Solve(p)), (std::vector<int>{4, 0}));
  EXPECT_EQ(Counts(Solve(p, With("completion_aware"))), (std::vector<int>{1, 3}));
}

TEST(AllocLifetimeAware, GrowsOntoTheLongestLivedNodesAndShrinksOffTheShortest) {
  Problem p = FreshPool({MakeJob("a", 1, 2, {1, 2}, {10, 20})}, 4);
  p.expected_idle_s = {10, 1000, 50, 500};  // nodes 100..103
  const Allocation grow = Solve(p, With("lifetime_aware"));
  EXPECT_EQ(grow.jobs[0].added, (std::vector<NodeId>{101, 103}));
  // Holding 100, 101 and 102 with room for 1: keeps 101, the longest-lived.
  Problem shrink = FreshPool({MakeJob("a", 1, 1, {1}, {10})}, 4);
  shrink.expected_idle_s = p.expected_idle_s;
  shrink.current = {{100, "a"}, {101, "a"}, {102, "a"}};
  const Allocation s = Solve(shrink, With("lifetime_aware"));
  EXPECT_EQ(s.jobs[0].kept, (std::vector<NodeId>{101}));
  EXPECT_EQ(s.jobs[0].released, (std::vector<NodeId>{100, 102}));
  // Without expected idle times the nodes go lowest-numbered first, as for the other solvers.
  p.expected_idle_s.clear();
  EXPECT_EQ(Solve(p, With("lifetime_aware")).jobs[0].added, (std::vector<NodeId>{100, 101}));
}

TEST(AllocLifetimeAware, AnExpectedPreemptionLossLargerThanTheGainKeepsAJobOff) {
  // Nodes expected to stay 10 s, a shrink costs 20 s of the job's rate: any allocation loses more
  // than it earns, so the job is worth nothing anywhere (the exact solver then starts nothing).
  Problem p = FreshPool({MakeJob("a", 1, 2, {1, 2}, {10, 20}, 0.0, 20.0)}, 2);
  p.expected_idle_s = {10, 10};
  EXPECT_EQ(Counts(Solve(p)), (std::vector<int>{2}));
  EXPECT_DOUBLE_EQ(Solve(p, With("lifetime_aware")).objective, 0.0);
}

TEST(AllocPolicies, MaxMinNormalisesAtMaxNodesEvenBeyondThePool) {
  // a may use 8 nodes, the pool has 4: its normalised value at n is n / 8, for the policies too.
  const Problem p = FreshPool({MakeJob("a", 1, 8, {1, 8}, {1, 8}), MakeJob("b", 1, 4, {1, 4}, {1, 4})}, 4);
  const Allocation exact = Solve(p, With("exact", Goal::kMaxMinFair));
  const Allocation lifetime = Solve(p, With("lifetime_aware", Goal::kMaxMinFair));
  EXPECT_EQ(Counts(lifetime), Counts(exact));  // no expected idle times: the same problem
  EXPECT_DOUBLE_EQ(lifetime.min_normalized_value, exact.min_normalized_value);
  EXPECT_DOUBLE_EQ(Solve(p, With("completion_aware", Goal::kMaxMinFair)).min_normalized_value,
                   exact.min_normalized_value);
}

TEST(AllocPolicies, BadInputsAreErrorsNamingTheField) {
  Problem p = FreshPool({MakeJob("a", 1, 2, {1, 2}, {10, 20})}, 2);
  p.expected_idle_s = {10};
  std::string error;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("expected_idle_s has 1 entries; give none or one per pool node (2)"),
            std::string::npos);
  p.expected_idle_s = {10, 0};
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("expected_idle_s[1] (node 101): 0 must be"), std::string::npos) << error;
  p.expected_idle_s.clear();
  p.jobs[0].remaining_samples = -1;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("remaining_samples -1 must be a finite number >= 0"), std::string::npos) << error;
}

TEST(AllocPolicies, ReachTheBruteForceOptimumOfTheirObjective) {
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 600; ++i) {
    Problem p = testing::RandomProblem(rng, testing::RandomSpec{4, 9, 7});
    for (Job& job : p.jobs) {
      job.remaining_samples = unit(rng) < 0.5 ? 0.0 : 1.0 + 400.0 * unit(rng);
      job.throughput = curve::ThroughputCurve();  // the objective is the rate, as in the definition above
    }
    for (std::size_t k = 0; k < p.pool.size(); ++k) p.expected_idle_s.push_back(5.0 + 2000.0 * unit(rng));
    for (const std::string policy : {"completion_aware", "lifetime_aware"}) {
      const Allocation a = Solve(p, With(policy));
      ASSERT_TRUE(SatisfiesConstraints(Reshaped(p, policy), a)) << "instance " << i << " " << policy;
      const testing::Reference ref = testing::BruteForce(Reshaped(p, policy), Goal::kThroughput);
      ASSERT_TRUE(testing::Near(a.objective, ref.objective, 1e-9))
          << "instance " << i << " " << policy << ": " << a.objective << " vs " << ref.objective;
      if (policy != "lifetime_aware") continue;
      // Node choice: no free node left over outlives an added one; no released node outlives a kept one.
      std::set<NodeId> used;
      for (const Assignment& x : a.map) used.insert(x.node);
      auto life = [&](NodeId n) {
        return p.expected_idle_s[static_cast<std::size_t>(std::find(p.pool.begin(), p.pool.end(), n) -
                                                          p.pool.begin())];
      };
      for (const JobAllocation& ja : a.jobs) {
        for (const NodeId added : ja.added) {
          for (const NodeId n : p.pool) {
            if (!used.count(n)) {
              ASSERT_GE(life(added), life(n)) << "instance " << i;
            }
          }
        }
        for (const NodeId released : ja.released) {
          for (const NodeId kept : ja.kept) ASSERT_LE(life(released), life(kept)) << "instance " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace bft::alloc
