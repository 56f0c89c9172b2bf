// Standing random-model differential test of the MILP backends: a few hundred small valid models
// (knapsack rows over bounded integer variables plus piecewise-linear terms, some non-concave) are
// solved by every registered backend. Each result must be optimal, its point must satisfy the model
// (internal::FindViolation), and its objective must equal the optimum found by enumerating every
// integer point where that is cheap, and the other backend's otherwise. This is the test that found
// CBC 2.10 crashing (segmentation fault) on its native SOS2 branching.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bft/milp.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 2862933555777941757ULL + 3037000493ULL) {}
  int Uniform(int lo, int hi) {  // inclusive
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int>((state_ >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  }
  double Real(double lo, double hi) { return lo + (hi - lo) * Uniform(0, 1000000) / 1e6; }

 private:
  std::uint64_t state_;
};

struct Piece {
  int x;  // index into the integer variables
  std::vector<double> xs, ys;
  double weight;  // objective coefficient of f(x)
};

struct RandomModel {
  std::vector<int> upper;                 // x_i in [0, upper_i], integer
  std::vector<std::vector<int>> weights;  // rows: sum weights[r][i] x_i <= capacity[r]
  std::vector<int> capacity;
  std::vector<int> value;  // objective: sum value_i x_i + sum weight_p f_p(x_p)
  std::vector<Piece> pieces;
};

RandomModel MakeRandomModel(std::uint64_t seed) {
  Rng rng(seed);
  RandomModel r;
  const int n = rng.Uniform(3, 15);
  for (int i = 0; i < n; ++i) r.upper.push_back(rng.Uniform(1, 8));
  const int rows = rng.Uniform(1, 4);
  for (int k = 0; k < rows; ++k) {
    std::vector<int> w;
    for (int i = 0; i < n; ++i) w.push_back(rng.Uniform(0, 9));
    r.weights.push_back(w);
    r.capacity.push_back(rng.Uniform(5, 40));
  }
  for (int i = 0; i < n; ++i) r.value.push_back(rng.Uniform(-2, 9));
  const int pieces = rng.Uniform(1, 3);
  for (int p = 0; p < pieces; ++p) {
    Piece piece;
    piece.x = rng.Uniform(0, n - 1);
    const int breakpoints = rng.Uniform(2, 6);
    const int upper = r.upper[static_cast<std::size_t>(piece.x)];
    // Strictly increasing breakpoints covering [0, upper], some of them fractional.
    double x = 0.0;
    for (int k = 0; k < breakpoints; ++k) {
      piece.xs.push_back(x);
      piece.ys.push_back(rng.Real(0.0, 20.0));
      x += k + 2 == breakpoints ? std::max(0.5, upper - x) : rng.Real(0.25, 3.0);
    }
    if (piece.xs.back() < upper) piece.xs.back() = upper;
    piece.weight = rng.Uniform(0, 3) == 0 ? -1.0 : 1.0;
    r.pieces.push_back(piece);
  }
  return r;
}

double Interpolate(const Piece& p, double x) {
  for (std::size_t k = 0; k + 1 < p.xs.size(); ++k) {
    if (x <= p.xs[k + 1]) {
      const double t = (x - p.xs[k]) / (p.xs[k + 1] - p.xs[k]);
      return p.ys[k] + t * (p.ys[k + 1] - p.ys[k]);
    }
  }
  return p.ys.back();
}

Model BuildModel(const RandomModel& r) {
  Model m("random");
  std::vector<Var> x;
  for (int u : r.upper) x.push_back(m.AddInteger(0, u));
  for (std::size_t k = 0; k < r.weights.size(); ++k) {
    LinExpr row;
    for (std::size_t i = 0; i < x.size(); ++i) row.AddTerm(x[i], r.weights[k][i]);
    m.AddConstraint(row <= r.capacity[k], "row" + std::to_string(k));
  }
  LinExpr objective;
  for (std::size_t i = 0; i < x.size(); ++i) objective.AddTerm(x[i], r.value[i]);
  for (const Piece& p : r.pieces) {
    const Var y = m.AddPiecewiseLinear(x[static_cast<std::size_t>(p.x)], p.xs, p.ys);
    objective.AddTerm(y, p.weight);
  }
  m.Maximize(objective);
  return m;
}

// The optimum by enumerating every integer point; nullopt-like (NaN) when there are too many.
double EnumeratedOptimum(const RandomModel& r) {
  double points = 1.0;
  for (int u : r.upper) points *= u + 1;
  if (points > 50000) return std::nan("");
  std::vector<int> x(r.upper.size(), 0);
  double best = -kInf;
  while (true) {
    bool feasible = true;
    for (std::size_t k = 0; k < r.weights.size() && feasible; ++k) {
      int lhs = 0;
      for (std::size_t i = 0; i < x.size(); ++i) lhs += r.weights[k][i] * x[i];
      feasible = lhs <= r.capacity[k];
    }
    if (feasible) {
      double value = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) value += r.value[i] * x[i];
      for (const Piece& p : r.pieces) value += p.weight * Interpolate(p, x[static_cast<std::size_t>(p.x)]);
      best = std::max(best, value);
    }
    std::size_t i = 0;
    while (i < x.size() && x[i] == r.upper[i]) x[i++] = 0;
    if (i == x.size()) break;
    ++x[i];
  }
  return best;
}

TEST(MilpRandomModels, EveryBackendSolvesKnapsacksWithPiecewiseTermsToTheSameOptimum) {
  std::vector<std::string> backends;  // the real ones (other tests register fakes)
  for (const std::string& name : RegisteredBackends()) {
    if (name == "glpk" || name == "cbc") backends.push_back(name);
  }
  ASSERT_FALSE(backends.empty());
  constexpr int kModels = 300;
  int enumerated = 0;
  for (int seed = 0; seed < kModels; ++seed) {
    const RandomModel random = MakeRandomModel(static_cast<std::uint64_t>(seed));
    const Model model = BuildModel(random);
    double reference = EnumeratedOptimum(random);
    if (!std::isnan(reference)) ++enumerated;
    for (const std::string& backend : backends) {
      SCOPED_TRACE("model seed " + std::to_string(seed) + ", backend " + backend);
      SolveOptions options;
      options.time_limit_s = 60;
      const Result result = Solve(model, backend, options);
      // Every model is feasible (x = 0) and bounded (integer variables with finite bounds).
      ASSERT_TRUE(result.optimal()) << ToString(result.termination) << ": " << result.message;
      EXPECT_EQ(internal::FindViolation(model, result.values), "");
      if (std::isnan(reference)) {
        reference = result.objective;  // the first backend's optimum, checked against the others
      } else {
        EXPECT_NEAR(result.objective, reference, 1e-6 * std::max(1.0, std::abs(reference)));
      }
    }
  }
  // The enumeration must check a real share of the models, not only the backends against each other.
  EXPECT_GE(enumerated, kModels / 4);
}

}  // namespace
}  // namespace bft::milp
