// Helpers shared by the MILP model, the LP exporter and the backends (not part of the public API).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
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

// The frame every backend's Solve shares: validates the options (InvalidArgument naming the
// backend), stamps the result with the backend and model, runs `body(clock, &result)`, turns
// running out of memory into Termination::kError, and times the whole call.
template <typename Body>
Result SolveFrame(const std::string& backend, const Model& model, const SolveOptions& options, Body&& body) {
  std::string invalid;
  if (!options.IsValid(&invalid)) throw InvalidArgument(backend + ": " + invalid);
  const Stopwatch clock;
  Result result;
  result.backend = backend;
  result.model_id = model.id();
  try {
    body(clock, &result);
  } catch (const std::bad_alloc&) {
    result = Result{};
    result.backend = backend;
    result.model_id = model.id();
    result.termination = Termination::kError;
    result.message = "out of memory while building the " + backend + " problem";
  }
  result.wall_time_s = clock.ElapsedSeconds();
  return result;
}

// Relative tolerance of FindViolation, looser than the backends' own (1e-7..1e-6) so that only real
// violations are reported, not the rounding of integer values.
inline constexpr double kFeasibilityTolerance = 1e-6;

// Empty if `values` satisfy every bound, integrality, row and piecewise-linear function of `model`
// (within kFeasibilityTolerance, relative); otherwise a message naming the first violation.
std::string FindViolation(const Model& model, const std::vector<double>& values);

}  // namespace bft::milp::internal
