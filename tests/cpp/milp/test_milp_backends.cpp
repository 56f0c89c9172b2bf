// The bft::milp solver suite, run against every backend this build registered ("glpk", "cbc");
// a backend that was not built is reported as skipped. Expected optima are computed here by brute
// force or dynamic programming, never typed in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bft/milp.h"
#include "bft/milp_cbc.h"
#include "milp/internal.h"

#ifdef BFT_HAVE_GLPK
#include <glpk.h>
#endif

namespace bft::milp {
namespace {

using ::testing::HasSubstr;

// Deterministic pseudo-random integers, the same on every platform.
class Lcg {
 public:
  explicit Lcg(std::uint64_t seed) : state_(seed) {}
  int Uniform(int lo, int hi) {  // inclusive
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int>((state_ >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

class MilpBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto names = RegisteredBackends();
    if (std::find(names.begin(), names.end(), GetParam()) == names.end()) {
      GTEST_SKIP() << "MILP backend '" << GetParam()
                   << "' was not built (CBC needs coinor-libcbc-dev at configure time)";
    }
    backend_ = MakeBackend(GetParam());
  }
  Result Run(const Model& model, SolveOptions options = {}) const {
    Result r = backend_->Solve(model, options);
    EXPECT_EQ(r.backend, GetParam());
    return r;
  }
  std::unique_ptr<Backend> backend_;
};

// ---- known optima -------------------------------------------------------------------------------

struct Knapsack {
  std::vector<int> values, weights;
  int capacity;
};

Knapsack MakeKnapsack(std::uint64_t seed, int items) {
  Lcg rng(seed);
  Knapsack k;
  int total = 0;
  for (int i = 0; i < items; ++i) {
    k.values.push_back(rng.Uniform(5, 60));
    k.weights.push_back(rng.Uniform(3, 40));
    total += k.weights.back();
  }
  k.capacity = total / 3;
  return k;
}

int KnapsackByDynamicProgramming(const Knapsack& k) {
  std::vector<int> best(static_cast<std::size_t>(k.capacity) + 1, 0);
  for (std::size_t i = 0; i < k.values.size(); ++i) {
    for (int c = k.capacity; c >= k.weights[i]; --c) {
      best[static_cast<std::size_t>(c)] = std::max(
          best[static_cast<std::size_t>(c)], best[static_cast<std::size_t>(c - k.weights[i])] + k.values[i]);
    }
  }
  return best.back();
}

Model KnapsackModel(const Knapsack& k, std::vector<Var>* take) {
  Model m("knapsack");
  LinExpr value, weight;
  for (std::size_t i = 0; i < k.values.size(); ++i) {
    take->push_back(m.AddBinary("take" + std::to_string(i)));
    value += k.values[i] * LinExpr(take->back());
    weight += k.weights[i] * LinExpr(take->back());
  }
  m.AddConstraint(weight <= k.capacity, "capacity");
  m.Maximize(value);
  return m;
}

TEST_P(MilpBackendTest, KnapsackMatchesDynamicProgramming) {
  for (std::uint64_t seed : {1, 2, 3}) {
    const Knapsack k = MakeKnapsack(seed, 25);
    std::vector<Var> take;
    const Model m = KnapsackModel(k, &take);
    const Result r = Run(m);
    ASSERT_TRUE(r.optimal()) << ToString(r.termination) << ": " << r.message;
    const int expected = KnapsackByDynamicProgramming(k);
    EXPECT_NEAR(r.objective, expected, 1e-6);
    EXPECT_NEAR(r.best_bound, expected, 1e-6 * expected);
    int weight = 0, value = 0;
    for (std::size_t i = 0; i < take.size(); ++i) {
      const double v = r.Value(take[i]);
      EXPECT_EQ(v, std::round(v)) << "integer variables are reported as exact integers";
      if (v > 0.5) weight += k.weights[i], value += k.values[i];
    }
    EXPECT_LE(weight, k.capacity);
    EXPECT_EQ(value, expected);
    EXPECT_GE(r.wall_time_s, 0.0);
  }
}

TEST_P(MilpBackendTest, KnapsackWithoutPresolveGivesTheSameOptimum) {
  const Knapsack k = MakeKnapsack(7, 20);
  std::vector<Var> take;
  const Model m = KnapsackModel(k, &take);
  SolveOptions options;
  options.presolve = false;
  const Result r = Run(m, options);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_NEAR(r.objective, KnapsackByDynamicProgramming(k), 1e-6);
}

// Weights 2^0..2^29 under a capacity of 2^29 + 3: the most binaries taken is 29 (all but the largest).
// GLPK's MIP presolver called 24 optimal here; a row this wide is now solved without it.
TEST_P(MilpBackendTest, AWideRowKeepsItsOptimum) {
  Model m("powers");
  LinExpr weight, count;
  for (int i = 0; i < 30; ++i) {
    const Var x = m.AddBinary("x" + std::to_string(i));
    weight += std::ldexp(1.0, i) * LinExpr(x);
    count += LinExpr(x);
  }
  m.AddConstraint(weight <= std::ldexp(1.0, 29) + 3, "capacity");
  m.Maximize(count);
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << ToString(r.termination) << ": " << r.message;
  EXPECT_NEAR(r.objective, 29.0, 1e-6);
}

TEST_P(MilpBackendTest, AssignmentMatchesBruteForce) {
  const int n = 6;
  Lcg rng(11);
  std::vector<std::vector<int>> cost(n, std::vector<int>(n));
  for (auto& row : cost)
    for (auto& c : row) c = rng.Uniform(1, 50);
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  int best = INT32_MAX;
  do {
    int total = 0;
    for (int i = 0; i < n; ++i) total += cost[i][perm[i]];
    best = std::min(best, total);
  } while (std::next_permutation(perm.begin(), perm.end()));

  Model m("assignment");
  std::vector<std::vector<Var>> x(n);
  LinExpr total;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      x[i].push_back(m.AddBinary("x_" + std::to_string(i) + "_" + std::to_string(j)));
      total += cost[i][j] * LinExpr(x[i][j]);
    }
  for (int i = 0; i < n; ++i) {
    LinExpr row, col;
    for (int j = 0; j < n; ++j) row += x[i][j], col += x[j][i];
    m.AddConstraint(row == 1, "worker" + std::to_string(i));
    m.AddConstraint(col == 1, "task" + std::to_string(i));
  }
  m.Minimize(total);
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_NEAR(r.objective, best, 1e-6);
  EXPECT_NEAR(r.Value(total), best, 1e-6);
  for (int i = 0; i < n; ++i) {
    double assigned = 0;
    for (int j = 0; j < n; ++j) assigned += r.Value(x[i][j]);
    EXPECT_NEAR(assigned, 1.0, 1e-6);
  }
}

TEST_P(MilpBackendTest, LinearProgramWithFractionalOptimum) {
  // max x + y s.t. 2x + y <= 4, x + 2y <= 4: the optimum is the vertex x = y = 4/3, objective 8/3.
  Model m("lp");
  Var x = m.AddContinuous(0, kInf, "x");
  Var y = m.AddContinuous(0, kInf, "y");
  m.AddConstraint(2 * x + y <= 4, "a");
  m.AddConstraint(x + 2 * y <= 4, "b");
  m.Maximize(x + y + 1.5);
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_NEAR(r.Value(x), 4.0 / 3.0, 1e-7);
  EXPECT_NEAR(r.Value(y), 4.0 / 3.0, 1e-7);
  EXPECT_NEAR(r.objective, 8.0 / 3.0 + 1.5, 1e-7);  // objective constant included
  EXPECT_NEAR(r.best_bound, r.objective, 1e-7);
  EXPECT_NEAR(r.gap, 0.0, 1e-7);
}

TEST_P(MilpBackendTest, IntegerVariablesWithNegativeAndFreeBounds) {
  // min 3a - 2b with a in [-4, 4] integer, b free integer, a + b >= -1.5, b - a <= 2.5, b <= 6:
  // enumerate all (a, b) with |b| <= 10 to check.
  Model m;
  Var a = m.AddInteger(-4, 4, "a");
  Var b = m.AddInteger(-kInf, kInf, "b");
  m.AddConstraint(a + b >= -1.5);
  m.AddConstraint(b - a <= 2.5);
  m.AddConstraint(LinExpr(b) <= 6);
  m.Minimize(3 * a - 2 * b);
  double best = kInf;
  for (int ai = -4; ai <= 4; ++ai)
    for (int bi = -10; bi <= 10; ++bi)
      if (ai + bi >= -1.5 && bi - ai <= 2.5 && bi <= 6) best = std::min(best, 3.0 * ai - 2.0 * bi);
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_NEAR(r.objective, best, 1e-6);
}

// ---- piecewise-linear ---------------------------------------------------------------------------

double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  for (std::size_t k = 0; k + 1 < xs.size(); ++k) {
    if (x <= xs[k + 1]) return ys[k] + (ys[k + 1] - ys[k]) * (x - xs[k]) / (xs[k + 1] - xs[k]);
  }
  return ys.back();
}

struct Curve {
  const char* name;
  std::vector<double> xs, ys;
};

std::vector<Curve> TestCurves() {
  return {
      {"concave", {0, 1, 2, 4, 8}, {0, 3, 5, 6, 6.5}},
      {"convex", {-2, 0, 1, 3}, {4, 0, 1, 9}},
      {"zigzag", {0, 1, 2, 3, 4, 5, 6}, {0, 5, 1, 6, 0, 4, -2}},  // neither: hull and f differ a lot
      {"two points", {1, 3}, {10, -10}},
  };
}

TEST_P(MilpBackendTest, PiecewiseLinearMatchesDirectEvaluationBothDirections) {
  int checked = 0;
  for (const Curve& curve : TestCurves()) {
    const double lo = curve.xs.front(), hi = curve.xs.back();
    for (int step = 0; step <= 24; ++step) {
      const double at = lo + (hi - lo) * step / 24.0;
      for (Sense sense : {Sense::kMaximize, Sense::kMinimize}) {
        Model m(curve.name);
        Var x = m.AddContinuous(-100, 100, "x");
        Var y = m.AddPiecewiseLinear(x, curve.xs, curve.ys, "f");
        m.AddConstraint(LinExpr(x) == at, "fix_x");
        // Pushing y up (or down) would expose a convexified formulation: y must still equal f(x).
        m.SetObjective(LinExpr(y), sense);
        const Result r = Run(m);
        ASSERT_TRUE(r.optimal()) << curve.name << " at x=" << at << ": " << r.message;
        EXPECT_NEAR(r.Value(y), Interpolate(curve.xs, curve.ys, at), 1e-6)
            << curve.name << " at x=" << at << (sense == Sense::kMaximize ? " (max)" : " (min)");
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 25 * 2);
}

TEST_P(MilpBackendTest, NonConcaveCurveIsNotConvexified) {
  // max f(x) - c x over the zigzag: the optimum is at a breakpoint (brute force over breakpoints);
  // a convexified (hull) formulation would report a larger value between breakpoints.
  const Curve curve = TestCurves()[2];
  for (double c : {-2.0, -0.5, 0.0, 0.3, 1.0, 2.5}) {
    Model m("zigzag");
    Var x = m.AddContinuous(-kInf, kInf, "x");
    Var y = m.AddPiecewiseLinear(x, curve.xs, curve.ys, "f");
    m.Maximize(y - c * x);
    double best = -kInf;
    for (std::size_t k = 0; k < curve.xs.size(); ++k) best = std::max(best, curve.ys[k] - c * curve.xs[k]);
    const Result r = Run(m);
    ASSERT_TRUE(r.optimal()) << "c=" << c << ": " << r.message;
    EXPECT_NEAR(r.objective, best, 1e-6) << "c=" << c;
    EXPECT_NEAR(r.Value(y), Interpolate(curve.xs, curve.ys, r.Value(x)), 1e-6) << "c=" << c;
    EXPECT_GE(r.Value(x), curve.xs.front() - 1e-9);
    EXPECT_LE(r.Value(x), curve.xs.back() + 1e-9);
  }
}

TEST_P(MilpBackendTest, PiecewiseLinearOfAnIntegerVariableInsideAKnapsack) {
  // Split an integer budget between three jobs with non-concave speed-up curves; compare with
  // enumeration of every split.
  const std::vector<Curve> jobs = {
      {"a", {0, 2, 4, 8}, {0, 1, 5, 6}}, {"b", {0, 1, 3, 8}, {0, 3, 3.5, 9}}, {"c", {0, 4, 8}, {0, 2, 7}}};
  const int budget = 9;
  Model m("split");
  LinExpr used, total;
  std::vector<Var> n;
  for (const Curve& job : jobs) {
    n.push_back(m.AddInteger(0, 8, std::string("n_") + job.name));
    total += m.AddPiecewiseLinear(n.back(), job.xs, job.ys, std::string("speed_") + job.name);
    used += n.back();
  }
  m.AddConstraint(used <= budget, "budget");
  m.Maximize(total);
  double best = -kInf;
  for (int a = 0; a <= 8; ++a)
    for (int b = 0; b <= 8; ++b)
      for (int c = 0; c <= 8; ++c)
        if (a + b + c <= budget) {
          best =
              std::max(best, Interpolate(jobs[0].xs, jobs[0].ys, a) + Interpolate(jobs[1].xs, jobs[1].ys, b) +
                                 Interpolate(jobs[2].xs, jobs[2].ys, c));
        }
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_NEAR(r.objective, best, 1e-6);
}

// ---- infeasible, unbounded, time limit ----------------------------------------------------------

TEST_P(MilpBackendTest, InfeasibleLinearProgramIsDetected) {
  Model m;
  Var x = m.AddContinuous(0, 10, "x");
  Var y = m.AddContinuous(0, 10, "y");
  m.AddConstraint(x + y >= 5, "low");
  m.AddConstraint(x + y <= 3, "high");
  m.Maximize(x);
  const Result r = Run(m);
  EXPECT_EQ(r.termination, Termination::kInfeasible) << r.message;
  EXPECT_FALSE(r.has_solution);
  EXPECT_THROW(r.Value(x), Error);
}

TEST_P(MilpBackendTest, IntegerInfeasibleWithFeasibleRelaxationIsDetected) {
  Model m;
  Var x = m.AddInteger(0, 10, "x");
  Var y = m.AddInteger(0, 10, "y");
  m.AddConstraint(2 * x + 2 * y == 7, "odd");
  m.Maximize(x + y);
  for (bool presolve : {true, false}) {
    SolveOptions options;
    options.presolve = presolve;
    const Result r = Run(m, options);
    EXPECT_EQ(r.termination, Termination::kInfeasible) << "presolve=" << presolve << ": " << r.message;
    EXPECT_FALSE(r.has_solution);
  }
}

// Issue 29's repros: GLPK called OPTIMAL a point that broke a badly scaled row (x = y = 10 for
// 1e5 x - 1e5 y == 1) and one that broke a steep piecewise-linear term (y = 1e10 at x = 0 where
// f(0) = 0). Whatever a backend finds, no result passes on a point that breaks its model.
TEST_P(MilpBackendTest, NeverReportsAPointThatBreaksABadlyScaledRow) {
  Model m;
  Var x = m.AddInteger(0, 10, "x");
  Var y = m.AddInteger(0, 10, "y");
  m.AddConstraint(1e5 * x - 1e5 * y == 1, "scaled");
  m.Maximize(x + y);
  for (bool presolve : {true, false}) {
    SolveOptions options;
    options.presolve = presolve;
    const Result r = Run(m, options);
    EXPECT_NE(r.termination, Termination::kOptimal) << "presolve=" << presolve << ": " << r.message;
    EXPECT_FALSE(r.has_solution) << "presolve=" << presolve << ": x = " << r.values[0]
                                 << ", y = " << r.values[1];
  }
}

TEST_P(MilpBackendTest, NeverReportsAPointOffASteepPiecewiseTerm) {
  Model m;
  Var x = m.AddInteger(0, 10, "x");
  Var y = m.AddPiecewiseLinear(x, {0, 1e-10, 10}, {0, 1e10, 0}, "steep");
  m.Maximize(1.0 * y);
  const Result r = Run(m);
  if (r.has_solution) {
    EXPECT_EQ(internal::FindViolation(m, r.values), "") << r.message;
    EXPECT_NEAR(r.Value(y), 1e10 * 9 / (10 - 1e-10), 1e-6 * 1e10) << "x = " << r.Value(x);
  } else {
    EXPECT_EQ(r.termination, Termination::kError) << r.message;
    EXPECT_NE(r.message.find("breaks the model"), std::string::npos) << r.message;
  }
}

TEST_P(MilpBackendTest, UnboundedIsDetected) {
  for (bool integer : {false, true}) {
    for (bool presolve : {true, false}) {
      Model m;
      Var x = m.AddVar(0, kInf, integer ? VarType::kInteger : VarType::kContinuous, "x");
      Var y = m.AddVar(0, kInf, integer ? VarType::kInteger : VarType::kContinuous, "y");
      m.AddConstraint(x - y <= 1, "c");
      m.Maximize(x + y);
      SolveOptions options;
      options.presolve = presolve;
      const Result r = Run(m, options);
      EXPECT_EQ(r.termination, Termination::kUnbounded)
          << "integer=" << integer << " presolve=" << presolve << ": " << r.message;
    }
  }
}

// Optima far from the origin: an unbounded variable whose optimum lies beyond Clp's dual bound (1e10)
// made CBC without presolve report "unbounded"; a row bound of 1e15, Clp's "large value", made it
// report `max x s.t. x <= 1e15` unbounded and, with bounded variables, a wrong point as optimal.
// Every backend gets the optimum or, for CBC beyond its range, an error naming the value.
TEST_P(MilpBackendTest, LargeOptimaAreFoundOrRefusedNeverMisreported) {
  for (double cap : {1e11, 1e13, 9e14, 1e15, 2e15, 1e17}) {
    for (double upper : {kInf, 2 * cap}) {
      for (bool integer : {false, true}) {
        for (bool presolve : {true, false}) {
          Model m;
          const VarType type = integer ? VarType::kInteger : VarType::kContinuous;
          Var x = m.AddVar(0, upper, type, "x");
          Var y = m.AddVar(0, upper, type, "y");
          m.AddConstraint(x + y <= cap, "cap");
          m.Maximize(x + 2 * y);
          SolveOptions options;
          options.presolve = presolve;
          const Result r = Run(m, options);
          const std::string where = "cap=" + std::to_string(cap) + " upper=" + std::to_string(upper) +
                                    " integer=" + std::to_string(integer) +
                                    " presolve=" + std::to_string(presolve) + ": " + r.message;
          const bool beyond_cbc =
              cap >= kCbcLargestMagnitude || (std::isfinite(upper) && upper >= kCbcLargestMagnitude);
          if (GetParam() == "cbc" && beyond_cbc) {
            EXPECT_EQ(r.termination, Termination::kError) << where;
            EXPECT_THAT(r.message, HasSubstr("upper bound is")) << where;
            EXPECT_THAT(r.message, HasSubstr("(Clp) treats finite values from 1e+15")) << where;
            continue;
          }
          // The documented gap: an optimum beyond kCbcArtificialBound without presolve.
          if (GetParam() == "cbc" && cap > kCbcArtificialBound && std::isinf(upper) && !presolve) continue;
          ASSERT_EQ(r.termination, Termination::kOptimal) << where;
          EXPECT_DOUBLE_EQ(r.objective, 2 * cap) << where;
        }
      }
    }
  }
}

TEST_P(MilpBackendTest, UnboundedRelaxationButNoIntegerPointIsNotOptimal) {
  // The LP relaxation is unbounded, yet 2z = 1 has no integer solution: "infeasible" is the exact
  // answer; "infeasible or unbounded" is allowed by the API, "unbounded" and a solution are not.
  Model m;
  Var x = m.AddContinuous(0, kInf, "x");
  Var z = m.AddInteger(0, 5, "z");
  m.AddConstraint(2 * z == 1, "odd");
  m.Maximize(x);
  const Result r = Run(m);
  EXPECT_THAT(r.termination, ::testing::AnyOf(Termination::kInfeasible, Termination::kInfeasibleOrUnbounded))
      << r.message;
  EXPECT_FALSE(r.has_solution);
  if (GetParam() == "glpk") {
    EXPECT_EQ(r.termination, Termination::kInfeasible) << r.message;
  }
}

// A market split instance (Cornuejols & Dawande): equality knapsacks that branch and bound
// cannot close in seconds.
Model MarketSplit(int rows, int cols, std::uint64_t seed) {
  Lcg rng(seed);
  Model m("market_split");
  std::vector<Var> x;
  for (int j = 0; j < cols; ++j) x.push_back(m.AddBinary("x" + std::to_string(j)));
  LinExpr slack_total;
  for (int i = 0; i < rows; ++i) {
    LinExpr row;
    int sum = 0;
    for (int j = 0; j < cols; ++j) {
      const int a = rng.Uniform(0, 99);
      row += a * LinExpr(x[static_cast<std::size_t>(j)]);
      sum += a;
    }
    Var plus = m.AddContinuous(0, kInf, "s_plus" + std::to_string(i));
    Var minus = m.AddContinuous(0, kInf, "s_minus" + std::to_string(i));
    m.AddConstraint(row + plus - minus == sum / 2, "split" + std::to_string(i));
    slack_total += plus + minus;
  }
  m.Minimize(slack_total);
  return m;
}

TEST_P(MilpBackendTest, TimeLimitIsHonouredOnAHardInstance) {
  const Model m = MarketSplit(6, 50, 5);
  SolveOptions options;
  options.time_limit_s = 1.0;
  const Result r = Run(m, options);
  EXPECT_EQ(r.termination, Termination::kTimeLimit) << r.message;
  // How close to the limit it stopped is a measurement (bench/), not a pass/fail check.
  if (r.has_solution) {
    EXPECT_LE(r.best_bound, r.objective + 1e-6);  // minimisation: bound below the incumbent
    EXPECT_GE(r.best_bound, -1e-6);               // slacks are non-negative
    EXPECT_NEAR(r.gap, std::abs(r.best_bound - r.objective) / std::max(1.0, std::abs(r.objective)), 1e-9);
  }
}

TEST_P(MilpBackendTest, InvalidOptionsThrow) {
  Model m;
  SolveOptions options;
  options.relative_gap = -1;
  EXPECT_THROW(backend_->Solve(m, options), InvalidArgument);
}

TEST_P(MilpBackendTest, EmptyModelIsOptimalWithTheConstant) {
  Model m;
  m.Minimize(LinExpr(2.5));
  const Result r = Run(m);
  ASSERT_TRUE(r.optimal()) << r.message;
  EXPECT_DOUBLE_EQ(r.objective, 2.5);
}

TEST_P(MilpBackendTest, ConstraintWithoutVariables) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  m.AddConstraint(LinExpr(x) - x <= 1, "trivial");
  m.Maximize(x);
  EXPECT_TRUE(Run(m).optimal());
  m.AddConstraint(LinExpr(x) - x >= 1, "impossible");
  EXPECT_EQ(Run(m).termination, Termination::kInfeasible);
}

// ---- threads ------------------------------------------------------------------------------------

TEST_P(MilpBackendTest, ConcurrentSolvesAgreeWithSequentialOnes) {
  const int kThreads = 8, kRounds = 4;
  std::vector<Knapsack> instances;
  std::vector<double> expected;
  for (int t = 0; t < kThreads; ++t) {
    instances.push_back(MakeKnapsack(100 + static_cast<std::uint64_t>(t), 30));
    expected.push_back(KnapsackByDynamicProgramming(instances.back()));
  }
  std::vector<std::vector<double>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<Var> take;
        const Model m = KnapsackModel(instances[static_cast<std::size_t>(t)], &take);
        // A piecewise-linear term too, so the backends' formulations run concurrently.
        Model with_pwl = m;
        Var u = with_pwl.AddContinuous(0, 4, "u");
        Var f = with_pwl.AddPiecewiseLinear(u, {0, 1, 2, 4}, {0, 2, 0, 3}, "f");
        with_pwl.AddConstraint(LinExpr(u) <= 1.5, "u_cap");
        const Result a = backend_->Solve(m, {});
        const Result b = backend_->Solve(with_pwl, {});
        got[static_cast<std::size_t>(t)].push_back(a.optimal() ? a.objective : -1);
        got[static_cast<std::size_t>(t)].push_back(b.optimal() ? b.Value(f) : -1);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[static_cast<std::size_t>(t)].size(), 2u * kRounds);
    for (int round = 0; round < kRounds; ++round) {
      EXPECT_NEAR(got[static_cast<std::size_t>(t)][2 * round], expected[static_cast<std::size_t>(t)], 1e-6);
      // f is not in the objective; it must still equal f(u) for whatever u was chosen, u in [0,1.5]
      EXPECT_GE(got[static_cast<std::size_t>(t)][2 * round + 1], -1e-6);
      EXPECT_LE(got[static_cast<std::size_t>(t)][2 * round + 1], 2.0 + 1e-6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MilpBackendTest, ::testing::Values("glpk", "cbc"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- LP export round trip through GLPK's reader --------------------------------------------------

#ifdef BFT_HAVE_GLPK
TEST(MilpLpExportGlpk, ReadBackByGlpkGivesTheSameOptimum) {
  const Knapsack k = MakeKnapsack(3, 15);
  std::vector<Var> take;
  Model m = KnapsackModel(k, &take);
  Var extra = m.AddInteger(-3, 3, "extra count");  // a name that needs sanitising
  Var free_var = m.AddContinuous(-kInf, kInf, "free");
  m.AddConstraint(LinExpr(extra) + free_var, -2.5, 4, "ranged row");
  m.AddConstraint(LinExpr(free_var) <= 1, "cap");
  LinExpr objective;
  for (std::size_t i = 0; i < take.size(); ++i) objective += k.values[i] * LinExpr(take[i]);
  m.Maximize(objective + free_var + 2 * extra + 7);
  const Result direct = Solve(m, "glpk");
  ASSERT_TRUE(direct.optimal()) << direct.message;

  const std::string path = ::testing::TempDir() + "/bft_milp_roundtrip.lp";
  m.WriteLp(path);
  glp_term_out(GLP_OFF);
  glp_prob* prob = glp_create_prob();
  ASSERT_EQ(glp_read_lp(prob, nullptr, path.c_str()), 0) << m.ToLpString();
  EXPECT_EQ(glp_get_num_cols(prob), m.num_vars());
  glp_iocp iocp;
  glp_init_iocp(&iocp);
  iocp.presolve = GLP_ON;
  ASSERT_EQ(glp_intopt(prob, &iocp), 0);
  EXPECT_NEAR(glp_mip_obj_val(prob) + m.objective_constant(), direct.objective, 1e-6);
  glp_delete_prob(prob);
  glp_term_out(GLP_ON);
  std::remove(path.c_str());
}

TEST(MilpLpExportGlpk, ModelsWithoutWrittenRowsAreReadBack) {
  // Found by tests/fuzz/fuzz_lp_roundtrip: GLPK refused the LP text of the empty model (a
  // constraints section without a row); a model whose only row is free wrote none either.
  Model empty("empty");
  Model free_row("free_row");
  Var x = free_row.AddContinuous(-1, 1, "x");
  free_row.AddConstraint(LinExpr(x), -kInf, kInf, "free");
  free_row.Maximize(LinExpr(x));
  for (const Model* m : {&empty, &free_row}) {
    const std::string path = ::testing::TempDir() + "/bft_milp_no_rows.lp";
    m->WriteLp(path);
    glp_term_out(GLP_OFF);
    glp_prob* prob = glp_create_prob();
    EXPECT_EQ(glp_read_lp(prob, nullptr, path.c_str()), 0) << m->ToLpString();
    glp_delete_prob(prob);
    glp_term_out(GLP_ON);
    std::remove(path.c_str());
  }
}
#endif

}  // namespace
}  // namespace bft::milp
