// A backend-independent check that a solution satisfies its model: the last line of defence
// against a solver that reports a point it should not (CBC 2.10's SOS preprocessing does, see
// cbc_backend.cpp; GLPK does on badly scaled rows and piecewise-linear terms, docs/milp.md).
// SolveFrame runs it on every result of every backend.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>

#include "milp/internal.h"

namespace bft::milp::internal {

namespace {

// The relative floating-point error allowed on a sum of exact terms: far above double's 1e-16 per
// operation, far below any violation worth reporting.
constexpr double kSumRoundingTolerance = 1e-9;

// Slack allowed on a value that should equal `target`, for activity built from terms of total size `scale`.
double Tolerance(double target, double scale) {
  return kFeasibilityTolerance * std::max({1.0, std::abs(target), scale});
}

double PiecewiseValue(const PiecewiseLinearData& f, double x) {
  const auto hi = std::upper_bound(f.xs.begin(), f.xs.end(), x) - f.xs.begin();
  if (hi == 0) return f.ys.front();
  if (hi == static_cast<std::ptrdiff_t>(f.xs.size())) return f.ys.back();
  const double t = (x - f.xs[hi - 1]) / (f.xs[hi] - f.xs[hi - 1]);
  return f.ys[hi - 1] + t * (f.ys[hi] - f.ys[hi - 1]);
}

// The largest magnitude among `values` (finite ones): a quantity that ranges that far is judged
// relative to it, as a solver that scales its model does (a throughput variable bounded by 1e10 at
// -2e-6 is at 0 for every purpose).
double Magnitude(std::initializer_list<double> values) {
  double m = 0.0;
  for (const double v : values)
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

double Magnitude(const std::vector<double>& values) {
  double m = 0.0;
  for (const double v : values) m = std::max(m, std::abs(v));
  return m;
}

}  // namespace

std::string FindViolation(const Model& model, const std::vector<double>& values) {
  std::ostringstream why;
  if (values.size() != static_cast<std::size_t>(model.num_vars())) {
    why << "the solution has " << values.size() << " values for " << model.num_vars() << " variables";
    return why.str();
  }
  for (int j = 0; j < model.num_vars(); ++j) {
    const VarData& v = model.var(j);
    const double x = values[j];
    const double range = Magnitude({v.lower, v.upper});
    if (!std::isfinite(x) || x < v.lower - Tolerance(v.lower, range) ||
        x > v.upper + Tolerance(v.upper, range)) {
      why << "variable '" << v.name << "' = " << x << " is outside its bounds [" << v.lower << ", " << v.upper
          << "]";
      return why.str();
    }
    if (v.type != VarType::kContinuous && std::abs(x - std::round(x)) > kFeasibilityTolerance) {
      why << "integer variable '" << v.name << "' = " << x << " is fractional";
      return why.str();
    }
  }
  // An integer variable counts at its integer value, and its terms widen a row's tolerance only by
  // the rounding of their sum: a solver's slack on continuous values must not excuse integers that
  // break a row (GLPK called x = y = 10 feasible for 1e5 x - 1e5 y == 1: the slack 1e-6 x 2e6 of
  // the terms' size would have been 2).
  for (int r = 0; r < model.num_constraints(); ++r) {
    const RowData& row = model.constraint(r);
    double activity = 0.0, continuous_scale = 0.0, integer_scale = 0.0;
    for (std::size_t k = 0; k < row.vars.size(); ++k) {
      const bool integer = model.var(row.vars[k]).type != VarType::kContinuous;
      const double x = values[row.vars[k]];
      const double term = row.coefs[k] * (integer ? std::round(x) : x);
      activity += term;
      (integer ? integer_scale : continuous_scale) += std::abs(term);
    }
    const double rounding = kSumRoundingTolerance * integer_scale;
    if (activity < row.lower - Tolerance(row.lower, continuous_scale) - rounding ||
        activity > row.upper + Tolerance(row.upper, continuous_scale) + rounding) {
      why << "constraint '" << row.name << "' has activity " << activity << " outside [" << row.lower << ", "
          << row.upper << "]";
      return why.str();
    }
  }
  for (const PiecewiseLinearData& f : model.piecewise_linear()) {
    const double x = model.var(f.x).type != VarType::kContinuous ? std::round(values[f.x]) : values[f.x];
    const double y = values[f.y];
    const double fx = PiecewiseValue(f, x);
    const double x_range = Magnitude(f.xs), y_range = std::max(Magnitude(f.ys), std::abs(y));
    if (x < f.xs.front() - Tolerance(f.xs.front(), x_range) ||
        x > f.xs.back() + Tolerance(f.xs.back(), x_range) || std::abs(y - fx) > Tolerance(fx, y_range)) {
      why << "piecewise-linear '" << f.name << "': y = " << y << " but f(" << x << ") = " << fx;
      return why.str();
    }
  }
  return {};
}

void RejectPointThatBreaksModel(const Model& model, Result* result) {
  if (!result->has_solution) return;
  const std::string violation = FindViolation(model, result->values);
  if (violation.empty()) return;
  result->message = result->backend + " returned a point that breaks the model (it said " +
                    ToString(result->termination) + ": " + result->message + "): " + violation;
  result->termination = Termination::kError;
  result->has_solution = false;
  result->values.clear();
}

}  // namespace bft::milp::internal
