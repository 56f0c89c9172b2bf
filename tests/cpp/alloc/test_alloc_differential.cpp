// Differential tests: the exact solver against brute force and a plain DP over every count, and the
// node-level MILP, the count-level MILP and the exact solver against each other on every
// registered backend. Every result goes through the same invariant checker.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "../shared_data.h"
#include "alloc_test_util.h"
#include "bft/alloc.h"
#include "bft/jobs.h"

namespace bft::alloc {
namespace {

using testing::Near;
using testing::RandomProblem;
using testing::RandomSpec;
using testing::SatisfiesConstraints;

SolveOptions With(const std::string& solver, Goal goal = Goal::kThroughput,
                  const std::string& backend = "glpk") {
  SolveOptions options;
  options.solver = solver;
  options.goal = goal;
  options.milp_backend = backend;
  return options;
}

std::string Describe(const Problem& p) {
  std::ostringstream os;
  os << p.jobs.size() << " jobs, " << p.pool.size() << " nodes, " << p.current.size() << " mapped, tfwd "
     << p.tfwd_s;
  return os.str();
}

TEST(AllocDifferential, ExactMatchesBruteForceOnRandomProblems) {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 3000; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{5, 10, 8});
    const Allocation a = Solve(p);
    ASSERT_TRUE(SatisfiesConstraints(p, a)) << "instance " << i << ": " << Describe(p);
    const testing::Reference ref = testing::BruteForce(p, Goal::kThroughput);
    ASSERT_TRUE(Near(a.objective, ref.objective, 1e-9))
        << "instance " << i << ": exact " << a.objective << " vs brute force " << ref.objective << "; "
        << Describe(p);
  }
}

TEST(AllocDifferential, ExactMaxMinMatchesBruteForce) {
  std::mt19937_64 rng(777);
  for (int i = 0; i < 1500; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{4, 9, 7});
    const Allocation a = Solve(p, With("exact", Goal::kMaxMinFair));
    ASSERT_TRUE(SatisfiesConstraints(p, a)) << "instance " << i << ": " << Describe(p);
    const testing::Reference ref = testing::BruteForce(p, Goal::kMaxMinFair);
    ASSERT_NEAR(a.min_normalized_value, ref.min_normalized, testing::kFairnessTolerance)
        << "instance " << i << ": " << Describe(p);
    ASSERT_TRUE(Near(a.objective, ref.objective, 1e-9))
        << "instance " << i << ": exact " << a.objective << " vs brute force " << ref.objective;
  }
}

TEST(AllocDifferential, ExactMatchesPlainDpOnLargerProblems) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 150; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{60, 600, 64});
    const Allocation a = Solve(p);
    ASSERT_TRUE(SatisfiesConstraints(p, a)) << "instance " << i << ": " << Describe(p);
    const double ref = testing::PlainDp(p);
    ASSERT_TRUE(Near(a.objective, ref, 1e-9))
        << "instance " << i << ": exact " << a.objective << " vs plain DP " << ref << "; " << Describe(p);
  }
}

TEST(AllocDifferential, EqualShareSatisfiesConstraintsAndNeverBeatsExact) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{8, 40, 16});
    const Allocation heuristic = Solve(p, With("equal_share"));
    ASSERT_TRUE(SatisfiesConstraints(p, heuristic)) << "instance " << i << ": " << Describe(p);
    EXPECT_NE(heuristic.status, AllocationStatus::kOptimal);
    const Allocation exact = Solve(p);
    ASSERT_LE(heuristic.objective, exact.objective + 1e-9 * std::max(1.0, std::abs(exact.objective)));
  }
}

// Solvers a (node MILP), b (count MILP) and c (exact) agree on >= 1,000 random instances per backend.
void AgreeOnRandomProblems(const std::string& backend, int instances, Goal goal, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int i = 0; i < instances; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{5, 10, 8});
    const Allocation exact = Solve(p, With("exact", goal));
    const Allocation count = Solve(p, With("count_milp", goal, backend));
    const Allocation node = Solve(p, With("node_milp", goal, backend));
    for (const Allocation* a : {&exact, &count, &node}) {
      ASSERT_TRUE(SatisfiesConstraints(p, *a))
          << backend << " " << a->solver << ", instance " << i << ": " << Describe(p) << "; " << a->message;
      ASSERT_EQ(a->status, AllocationStatus::kOptimal)
          << backend << " " << a->solver << ", instance " << i << ": " << a->message;
    }
    if (goal == Goal::kMaxMinFair) {
      ASSERT_TRUE(Near(count.min_normalized_value, exact.min_normalized_value))
          << backend << " instance " << i << ": count MILP min " << count.min_normalized_value << " vs exact "
          << exact.min_normalized_value;
      ASSERT_TRUE(Near(node.min_normalized_value, exact.min_normalized_value))
          << backend << " instance " << i << ": node MILP min " << node.min_normalized_value << " vs exact "
          << exact.min_normalized_value;
    }
    ASSERT_TRUE(Near(count.objective, exact.objective))
        << backend << " instance " << i << ": count MILP " << count.objective << " vs exact "
        << exact.objective << "; " << Describe(p) << "; " << count.message;
    ASSERT_TRUE(Near(node.objective, exact.objective))
        << backend << " instance " << i << ": node MILP " << node.objective << " vs exact " << exact.objective
        << "; " << Describe(p) << "; " << node.message;
    ++compared;
  }
  EXPECT_EQ(compared, instances);
}

using testing::HasBackend;

TEST(AllocDifferential, NodeLevelCountLevelAndExactAgreeOnGlpk) {
  if (!HasBackend("glpk")) GTEST_SKIP() << "the GLPK backend is not built into this test binary";
  AgreeOnRandomProblems("glpk", 1000, Goal::kThroughput, 1);
}

TEST(AllocDifferential, NodeLevelCountLevelAndExactAgreeOnCbc) {
  if (!HasBackend("cbc")) GTEST_SKIP() << "the CBC backend is not built into this test binary";
  AgreeOnRandomProblems("cbc", 1000, Goal::kThroughput, 2);
}

// A MILP stopped by a loose relative gap may end "optimal" (within that gap) without reaching the
// optimum: it must then not claim a proven optimum.
TEST(AllocDifferential, LooseGapNeverClaimsAProvenOptimumItDidNotReach) {
  std::mt19937_64 rng(7);
  int stopped_short = 0;
  for (int i = 0; i < 300; ++i) {
    const Problem p = RandomProblem(rng, RandomSpec{8, 40, 16});
    const Allocation exact = Solve(p, With("exact"));
    SolveOptions loose = With("count_milp");
    loose.milp.relative_gap = 0.5;
    const Allocation a = Solve(p, loose);
    const double tolerance = 1e-6 * std::max(1.0, std::abs(exact.objective));
    if (a.objective < exact.objective - tolerance) {
      ++stopped_short;
      EXPECT_NE(a.status, AllocationStatus::kOptimal) << "instance " << i << ": " << a.message;
    }
  }
  EXPECT_GT(stopped_short, 0) << "no instance stopped short of the optimum: the test checks nothing";
}

TEST(AllocDifferential, MaxMinFairnessAgreesAcrossAllSolvers) {
  if (!HasBackend("glpk")) GTEST_SKIP() << "the GLPK backend is not built into this test binary";
  AgreeOnRandomProblems("glpk", 300, Goal::kMaxMinFair, 3);
}

// Real curves: the seven ImageNet models of the BFTrainer evaluation, on a Summit-sized pool.
TEST(AllocDifferential, RealImagenetWorkloadExactMatchesPlainDpAndCountLevel) {
  const std::string path = bft::testing::SharedDataPath("jobs-imagenet-throughput-1001.jsonl");
  BFT_REQUIRE_SHARED_DATA(path);
  const std::vector<jobs::JobSpec> workload = jobs::ReadJobs(path);  // the one reader of the format
  ASSERT_GE(workload.size(), 100u);
  std::mt19937_64 rng(42);
  for (int round = 0; round < 6; ++round) {
    Problem p;
    const int num_jobs = round < 3 ? 10 : 100;
    const int pool = round % 3 == 0 ? 64 : (round % 3 == 1 ? 512 : 4734);
    for (int j = 0; j < num_jobs; ++j)
      p.jobs.push_back(alloc::FromJobSpec(workload[(round * 131 + j) % workload.size()]));
    for (int k = 0; k < pool; ++k) p.pool.push_back(k);
    std::shuffle(p.pool.begin(), p.pool.end(), rng);
    // Half the pool runs jobs at random: some grow, some shrink, some are below min (none here: min 1).
    for (int k = 0; k < pool / 2; ++k)
      p.current.push_back({p.pool[k], p.jobs[std::uniform_int_distribution<int>(0, num_jobs - 1)(rng)].id});
    const Allocation exact = Solve(p);
    ASSERT_TRUE(SatisfiesConstraints(p, exact)) << "round " << round;
    ASSERT_TRUE(Near(exact.objective, testing::PlainDp(p), 1e-9)) << "round " << round;
    if (HasBackend("glpk") && (num_jobs <= 10 || pool <= 64)) {  // GLPK takes seconds beyond
      const Allocation count = Solve(p, With("count_milp", Goal::kThroughput, "glpk"));
      ASSERT_TRUE(SatisfiesConstraints(p, count)) << "round " << round;
      EXPECT_TRUE(Near(count.objective, exact.objective)) << "round " << round << ": " << count.message;
    }
  }
}

}  // namespace
}  // namespace bft::alloc
