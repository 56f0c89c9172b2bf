// A backend-independent check that a solution satisfies its model: the last line of defence
// against a solver that reports a point it should not (CBC 2.10's SOS preprocessing does, see
// cbc_backend.cpp).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "milp/internal.h"

namespace bft::milp::internal {

namespace {

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
    if (!std::isfinite(x) || x < v.lower - Tolerance(v.lower, 0.0) || x > v.upper + Tolerance(v.upper, 0.0)) {
      why << "variable '" << v.name << "' = " << x << " is outside its bounds [" << v.lower << ", " << v.upper
          << "]";
      return why.str();
    }
    if (v.type != VarType::kContinuous && std::abs(x - std::round(x)) > kFeasibilityTolerance) {
      why << "integer variable '" << v.name << "' = " << x << " is fractional";
      return why.str();
    }
  }
  for (int r = 0; r < model.num_constraints(); ++r) {
    const RowData& row = model.constraint(r);
    double activity = 0.0, scale = 0.0;
    for (std::size_t k = 0; k < row.vars.size(); ++k) {
      const double term = row.coefs[k] * values[row.vars[k]];
      activity += term;
      scale += std::abs(term);
    }
    if (activity < row.lower - Tolerance(row.lower, scale) ||
        activity > row.upper + Tolerance(row.upper, scale)) {
      why << "constraint '" << row.name << "' has activity " << activity << " outside [" << row.lower << ", "
          << row.upper << "]";
      return why.str();
    }
  }
  for (const PiecewiseLinearData& f : model.piecewise_linear()) {
    const double x = values[f.x], y = values[f.y];
    const double fx = PiecewiseValue(f, x);
    if (x < f.xs.front() - Tolerance(f.xs.front(), 0.0) || x > f.xs.back() + Tolerance(f.xs.back(), 0.0) ||
        std::abs(y - fx) > Tolerance(fx, std::abs(y))) {
      why << "piecewise-linear '" << f.name << "': y = " << y << " but f(" << x << ") = " << fx;
      return why.str();
    }
  }
  return {};
}

}  // namespace bft::milp::internal
