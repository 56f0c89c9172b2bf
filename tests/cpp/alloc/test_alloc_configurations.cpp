// Jobs with several configurations (JigSaw's structured partial backpropagation, docs/spb.md): the
// solvers choose count and configuration together. Hand-solved cases where partial backpropagation
// must win and must lose, the restart a switch costs, equal share keeping full backpropagation, and
// every exact solver against a brute force over counts and configurations written here from the
// definitions in bft/alloc.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "alloc_test_util.h"
#include "bft/alloc.h"
#include "bft/milp.h"

namespace bft::alloc {
namespace {

using testing::FreshPool;
using testing::MakeJob;
using testing::With;

Configuration Partial(const std::string& name, std::vector<int> nodes, std::vector<double> rates,
                      double efficiency) {
  Configuration c;
  c.name = name;
  c.objective = curve::ThroughputCurve(std::move(nodes), std::move(rates));
  c.efficiency = efficiency;
  return c;
}

// A job of 1..2 nodes at 10 and 18 samples/s with full backpropagation, 14 and 26 with partial.
Job TwoWays(double efficiency, double scale_up_s = 0.0) {
  Job job = MakeJob("j", 1, 2, {1, 2}, {10, 18}, scale_up_s, 0.0);
  job.configurations = {Partial("spb", {1, 2}, {14, 26}, efficiency)};
  return job;
}

TEST(AllocConfigurations, PartialBackpropagationWinsWhenItsSamplesAreWorthEnough) {
  const Allocation a = Solve(FreshPool({TwoWays(0.9)}, 2));
  EXPECT_EQ(a.jobs[0].nodes_after, 2);
  EXPECT_EQ(a.jobs[0].configuration, 1);
  EXPECT_DOUBLE_EQ(a.jobs[0].value, 0.9 * 26);
  EXPECT_DOUBLE_EQ(a.jobs[0].rate, 26);  // samples/s; the value counts them at 0.9
  EXPECT_DOUBLE_EQ(a.objective, 10 * 0.9 * 26);
}

TEST(AllocConfigurations, AndLosesWhenTheyAreNot) {
  const Allocation a = Solve(FreshPool({TwoWays(0.5)}, 2));  // 13 < 18
  EXPECT_EQ(a.jobs[0].configuration, 0);
  EXPECT_DOUBLE_EQ(a.objective, 10 * 18);
}

TEST(AllocConfigurations, ASwitchCostsARestartOfTheRunningJob) {
  // Running on 2 nodes with full backpropagation: switching gains (23.4 - 18) x 10 s = 54 samples
  // and costs scale_up_s x 18 samples/s.
  for (const auto& [scale_up_s, switched] : {std::pair{30.0, false}, std::pair{2.0, true}}) {
    Problem p = FreshPool({TwoWays(0.9, scale_up_s)}, 2);
    p.current = {{100, "j"}, {101, "j"}};
    const Allocation a = Solve(p);
    EXPECT_EQ(a.jobs[0].configuration, switched ? 1 : 0) << scale_up_s;
    EXPECT_DOUBLE_EQ(a.jobs[0].penalty, switched ? scale_up_s * 18 : 0.0);
    EXPECT_DOUBLE_EQ(a.objective, switched ? 10 * 23.4 - scale_up_s * 18 : 180.0);
  }
}

TEST(AllocConfigurations, EqualShareKeepsFullBackpropagation) {
  const Allocation a = Solve(FreshPool({TwoWays(0.9)}, 2), With("equal_share"));
  EXPECT_EQ(a.jobs[0].nodes_after, 2);
  EXPECT_EQ(a.jobs[0].configuration, 0);
  EXPECT_DOUBLE_EQ(a.jobs[0].rate, 18);
}

TEST(AllocConfigurations, EqualShareSwitchingBackToFullPaysTheRestart) {
  // Running spb on 2 nodes (0.9 x 26 = 23.4); equal share puts it back on full at 2 nodes: a restart
  // of 5 s x 23.4.
  Problem p = FreshPool({TwoWays(0.9, 5.0)}, 2);
  p.jobs[0].configuration = 1;
  p.current = {{100, "j"}, {101, "j"}};
  const Allocation a = Solve(p, With("equal_share"));
  EXPECT_EQ(a.jobs[0].configuration, 0);
  EXPECT_DOUBLE_EQ(a.jobs[0].penalty, 5 * 23.4);
  EXPECT_DOUBLE_EQ(a.objective, 10 * 18 - 5 * 23.4);
}

TEST(AllocConfigurations, AFailedMilpSolveKeepsEveryJobsConfiguration) {
  if (!testing::HasBackend("glpk")) GTEST_SKIP() << "the GLPK backend is not built into this test binary";
  // exact would switch (10 x 23.4 - 2 x 18 > 180); a MILP stopped before any solution keeps all.
  Problem p = FreshPool({TwoWays(0.9, 2.0)}, 2);
  p.current = {{100, "j"}, {101, "j"}};
  EXPECT_EQ(Solve(p).jobs[0].configuration, 1);
  SolveOptions options = With("count_milp");
  options.milp.time_limit_s = 1e-9;
  const Allocation a = Solve(p, options);
  ASSERT_EQ(a.status, AllocationStatus::kFailed) << a.message;
  EXPECT_EQ(a.jobs[0].configuration, 0);
  EXPECT_EQ(a.jobs[0].nodes_after, 2);
  EXPECT_DOUBLE_EQ(a.jobs[0].penalty, 0.0);
}

TEST(AllocConfigurations, BadConfigurationsAreErrorsNamingThem) {
  std::string error;
  auto invalid = [&](const std::function<void(Job&)>& spoil) {
    Problem p = FreshPool({TwoWays(0.9)}, 2);
    spoil(p.jobs[0]);
    return !p.IsValid(&error);
  };
  EXPECT_TRUE(invalid([](Job& j) { j.configurations[0].efficiency = 1.5; }));
  EXPECT_NE(error.find("configurations[0] ('spb'): efficiency 1.5 must be in (0, 1]"), std::string::npos)
      << error;
  EXPECT_TRUE(invalid([](Job& j) { j.configurations[0].name = "full"; }));
  EXPECT_NE(error.find("name 'full' is taken"), std::string::npos) << error;
  EXPECT_TRUE(invalid([](Job& j) { j.configurations[0].objective = curve::ThroughputCurve(); }));
  EXPECT_NE(error.find("objective curve is empty"), std::string::npos) << error;
  EXPECT_TRUE(invalid([](Job& j) { j.configuration = 2; }));
  EXPECT_NE(error.find("configuration 2 is outside 0..1"), std::string::npos) << error;
}

// The objective of counts and configurations, from the definitions in bft/alloc.h.
double Term(const Problem& p, const Job& job, int before, int after, int configuration) {
  auto value = [&](int k, int n) {
    if (n == 0) return 0.0;
    if (k == 0) return job.objective.Evaluate(n);
    return job.configurations[k - 1].efficiency * job.configurations[k - 1].objective.Evaluate(n);
  };
  const bool running = before >= job.min_nodes;
  const double current = running ? value(job.configuration, before) : 0.0;
  double penalty = 0.0;
  if (running && after > before) penalty = job.scale_up_s * current;
  if (running && after < before) penalty = job.scale_down_s * current;
  if (running && after == 0) penalty = (job.scale_down_s + job.restart_s) * current;
  if (running && after == before && configuration != job.configuration) penalty = job.scale_up_s * current;
  return job.weight * (p.tfwd_s * value(configuration, after) - penalty);
}

double BruteForce(const Problem& p) {
  const std::vector<int> before = testing::CurrentCounts(p);
  double best = -std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, int, double)> go = [&](std::size_t j, int left, double sum) {
    if (j == p.jobs.size()) {
      best = std::max(best, sum);
      return;
    }
    const Job& job = p.jobs[j];
    for (int n = 0; n <= std::min(job.max_nodes, left); ++n) {
      if (n != 0 && n < job.min_nodes) continue;
      double term = -std::numeric_limits<double>::infinity();
      for (int k = 0; k <= static_cast<int>(job.configurations.size()); ++k) {
        term = std::max(term, Term(p, job, before[j], n, n == 0 ? job.configuration : k));
      }
      go(j + 1, left - n, sum + term);
    }
  };
  go(0, static_cast<int>(p.pool.size()), 0.0);
  return best;
}

TEST(AllocConfigurations, EveryExactSolverReachesTheBruteForceOptimum) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::pair<std::string, std::string>> solvers = {{"exact", ""}};
  for (const std::string backend : {"glpk", "cbc"}) {
    if (!testing::HasBackend(backend)) continue;
    solvers.push_back({"count_milp", backend});
    solvers.push_back({"node_milp", backend});
  }
  for (int i = 0; i < 300; ++i) {
    Problem p = testing::RandomProblem(rng, testing::RandomSpec{3, 8, 6});
    for (Job& job : p.jobs) {
      const int configurations = static_cast<int>(unit(rng) * 3);
      for (int k = 0; k < configurations; ++k) {
        std::vector<int> nodes;
        std::vector<double> rates;
        for (int n = 1; n <= job.max_nodes; n += 1 + static_cast<int>(unit(rng) * 3)) {
          nodes.push_back(n);
          rates.push_back(100.0 * unit(rng));
        }
        if (nodes.empty()) continue;
        job.configurations.push_back(Partial("c" + std::to_string(k), nodes, rates, 0.2 + 0.8 * unit(rng)));
      }
      job.configuration = static_cast<int>(unit(rng) * (1 + job.configurations.size()));
    }
    const double reference = BruteForce(p);
    for (const auto& [solver, backend] : solvers) {
      SolveOptions options = With(solver);
      if (!backend.empty()) options.milp_backend = backend;
      const Allocation a = Solve(p, options);
      ASSERT_EQ(a.status, AllocationStatus::kOptimal) << "instance " << i << " " << solver << " " << backend;
      ASSERT_TRUE(testing::Near(a.objective, reference, 1e-9))
          << "instance " << i << " " << solver << " " << backend << ": " << a.objective << " vs "
          << reference;
      // The configurations reported give the objective reported.
      double recomputed = 0.0;
      const std::vector<int> before = testing::CurrentCounts(p);
      for (std::size_t j = 0; j < p.jobs.size(); ++j) {
        recomputed += Term(p, p.jobs[j], before[j], a.jobs[j].nodes_after, a.jobs[j].configuration);
      }
      ASSERT_TRUE(testing::Near(recomputed, a.objective, 1e-9)) << "instance " << i << " " << solver;
    }
  }
}

}  // namespace
}  // namespace bft::alloc
