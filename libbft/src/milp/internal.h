// Helpers shared by the MILP model, the LP exporter and the backends (not part of the public API).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "bft/milp.h"

namespace bft::milp::internal {

// Shortest decimal text that reads back as exactly `value` ("3", "0.1", "1e+30", "inf", "-inf").
std::string FormatNumber(double value);

// Wall-clock stopwatch for Result::wall_time_s.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double ElapsedSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// |bound - objective| / max(1, |objective|), the gap as Result documents it.
inline double RelativeGap(double bound, double objective) {
  return std::abs(bound - objective) / std::max(1.0, std::abs(objective));
}

// Relative tolerance of FindViolation, looser than the backends' own (1e-7..1e-6) so that only real
// violations are reported, not the rounding of integer values.
inline constexpr double kFeasibilityTolerance = 1e-6;

// Empty if `values` satisfy every bound, integrality, row and piecewise-linear function of `model`
// (within kFeasibilityTolerance, relative); otherwise a message naming the first violation.
std::string FindViolation(const Model& model, const std::vector<double>& values);

}  // namespace bft::milp::internal
