// Helpers shared by the MILP model, the LP exporter and the backends (not part of the public API).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
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

// True in the child process of an isolated solve (set right after fork). The child has one thread,
// so a backend skips its process-wide locks there: another thread of the parent may have held one
// at the fork, and it would never be released in the child.
bool InIsolatedChild();

// Runs `solve` (which returns the result of the non-isolated solve) in a forked child process and
// returns what it returned, or Termination::kError if the child crashed, kTimeLimit if it had to be
// killed past its time limit (IsolationGraceSeconds), kInterrupted if options.interrupt asked for
// it. Never throws for anything the child does.
Result SolveIsolated(const std::string& backend, const Model& model, const SolveOptions& options,
                     const std::function<Result()>& solve);

// Polls SolveOptions::interrupt at most every kInterruptPollSeconds; a throw counts as true.
inline constexpr double kInterruptPollSeconds = 0.05;
class InterruptPoller {
 public:
  explicit InterruptPoller(const std::function<bool()>* interrupt) : interrupt_(interrupt) {}
  bool Requested() noexcept {
    if (interrupt_ == nullptr || !*interrupt_) return false;
    if (requested_) return true;
    if (polled_ && clock_.ElapsedSeconds() - last_s_ < kInterruptPollSeconds) return false;
    polled_ = true;
    last_s_ = clock_.ElapsedSeconds();
    try {
      requested_ = (*interrupt_)();
    } catch (...) {
      requested_ = true;
    }
    return requested_;
  }

 private:
  const std::function<bool()>* interrupt_;
  Stopwatch clock_;
  bool polled_ = false;
  bool requested_ = false;
  double last_s_ = 0.0;
};

// Checks a result's point against its model (FindViolation, below): a point that breaks a bound,
// an integrality, a row or a piecewise-linear term is never passed on, whatever the backend called
// it; the result becomes Termination::kError naming the backend and the first violation.
void RejectPointThatBreaksModel(const Model& model, Result* result);

// The frame every backend's Solve shares: validates the options (InvalidArgument naming the
// backend), runs the solve in a child process if options.isolate, stamps the result with the
// backend and model, runs `body(options, clock, &result)` (the options the body must use: in an
// isolated child, without `isolate` and `interrupt`), turns running out of memory into
// Termination::kError, rejects a point that breaks the model, and times the whole call.
template <typename Body>
Result SolveFrame(const std::string& backend, const Model& model, const SolveOptions& options, Body&& body) {
  std::string invalid;
  if (!options.IsValid(&invalid)) throw InvalidArgument(backend + ": " + invalid);
  if (options.isolate && !InIsolatedChild()) {
    SolveOptions in_child = options;
    in_child.isolate = false;
    in_child.interrupt = nullptr;  // the parent polls it (it may need the parent's threads, e.g. Python's)
    return SolveIsolated(backend, model, options, [&] { return SolveFrame(backend, model, in_child, body); });
  }
  const Stopwatch clock;
  Result result;
  result.backend = backend;
  result.model_id = model.id();
  try {
    body(options, clock, &result);
  } catch (const std::bad_alloc&) {
    result = Result{};
    result.backend = backend;
    result.model_id = model.id();
    result.termination = Termination::kError;
    result.message = "out of memory while building the " + backend + " problem";
  }
  RejectPointThatBreaksModel(model, &result);
  result.wall_time_s = clock.ElapsedSeconds();
  return result;
}

// Adds y = f(x) for one piecewise-linear term to a backend's formulation `f` with the incremental
// ("delta") formulation, which is exact for any f (never convexified) and uses only continuous and
// binary columns (no SOS sets):
//   x = X_0 + sum_s (X_{s+1} - X_s) d_s,   y = Y_0 + sum_s (Y_{s+1} - Y_s) d_s,   0 <= d_s <= 1,
//   d_{s+1} <= z_s <= d_s for s = 0 .. n-2 with z_s binary.
// Every integer z forces d = (1, ..., 1, t, 0, ..., 0), so (x, y) lies on one segment of the graph
// (docs/milp.md). `F` has AddCol(lower, upper, objective, integer) -> column,
// AddRow(lower, upper) -> row and AddElement(row, column, value); `x_col` and `y_col` are the
// backend's columns of the model's x and y.
template <typename F>
void AddIncrementalPiecewiseLinear(F& f, const PiecewiseLinearData& pwl, int x_col, int y_col) {
  const std::size_t segments = pwl.xs.size() - 1;
  std::vector<int> delta(segments), z(segments > 0 ? segments - 1 : 0);
  for (auto& d : delta) d = f.AddCol(0.0, 1.0, 0.0, false);
  for (auto& b : z) b = f.AddCol(0.0, 1.0, 0.0, true);
  const int row_x = f.AddRow(pwl.xs[0], pwl.xs[0]);
  f.AddElement(row_x, x_col, 1.0);
  const int row_y = f.AddRow(pwl.ys[0], pwl.ys[0]);
  f.AddElement(row_y, y_col, 1.0);
  for (std::size_t s = 0; s < segments; ++s) {
    f.AddElement(row_x, delta[s], -(pwl.xs[s + 1] - pwl.xs[s]));
    f.AddElement(row_y, delta[s], -(pwl.ys[s + 1] - pwl.ys[s]));
  }
  for (std::size_t s = 0; s + 1 < segments; ++s) {
    const int next_le_z = f.AddRow(-kInf, 0.0);  // d_{s+1} - z_s <= 0
    f.AddElement(next_le_z, delta[s + 1], 1.0);
    f.AddElement(next_le_z, z[s], -1.0);
    const int z_le_this = f.AddRow(-kInf, 0.0);  // z_s - d_s <= 0
    f.AddElement(z_le_this, z[s], 1.0);
    f.AddElement(z_le_this, delta[s], -1.0);
  }
}

// Relative tolerance of FindViolation, looser than the backends' own (1e-7..1e-6) so that only real
// violations are reported, not the rounding of integer values.
inline constexpr double kFeasibilityTolerance = 1e-6;

// Empty if `values` satisfy every bound, integrality, row and piecewise-linear function of `model`
// (within kFeasibilityTolerance, relative, with integer variables at their rounded values);
// otherwise a message naming the first violation.
std::string FindViolation(const Model& model, const std::vector<double>& values);

}  // namespace bft::milp::internal
