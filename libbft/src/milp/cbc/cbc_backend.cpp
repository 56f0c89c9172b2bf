// The CBC backend of bft::milp, through CBC's C interface (coin/Cbc_C_Interface.h, CBC 2.10).
//
// Piecewise-linear terms use the same incremental (binary) formulation as the GLPK backend
// (internal::AddIncrementalPiecewiseLinear), not CBC's native SOS2: CBC 2.10's branch and bound
// crashes on SOS2 sets (a segmentation fault in CbcBranchDynamicDecision::betterBranch on small
// valid knapsack models with piecewise terms, reproduced by the random differential test in
// tests/cpp/milp), and its preprocessing
// returns points that break the model's rows when SOS sets are present (coin-or/Cbc#283, #449).
//
// CBC 2.10 specifics handled here:
// - Cbc_solve() solves a model without integer columns as a plain LP and ignores the time limit;
//   such a model gets one extra integer column fixed at 0, so CbcMain1 (branch and bound) runs.
// - CbcMain1 keeps process-wide state (static parameters, a SIGINT handler), so solves are
//   serialised by a mutex and the previous SIGINT handler is put back after each solve.
// - Its time limit is CPU time unless `-timeMode elapsed`; we ask for wall-clock time.
// - Clp reads finite values from 1e15 as infinite and can lose optima where unbounded variables
//   grow large (kCbcLargestMagnitude, kCbcArtificialBound in bft/milp_cbc.h).
#include <coin/Cbc_C_Interface.h>

#include <cfloat>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bft/milp_cbc.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

using internal::Stopwatch;

std::mutex& CbcMutex() {
  static std::mutex mutex;
  return mutex;
}

double CbcBound(double value) {
  if (value == kInf) return DBL_MAX;
  if (value == -kInf) return -DBL_MAX;
  return value;
}

struct CbcDeleter {
  void operator()(Cbc_Model* model) const { Cbc_deleteModel(model); }
};
using CbcPtr = std::unique_ptr<Cbc_Model, CbcDeleter>;

// Puts the process's SIGINT disposition back after CbcMain1 replaced it.
class SigintGuard {
 public:
  SigintGuard() { sigaction(SIGINT, nullptr, &saved_); }
  ~SigintGuard() { sigaction(SIGINT, &saved_, nullptr); }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction saved_ {};
};

// The CBC problem in plain arrays, column-major, built before CBC is touched.
struct Formulation {
  std::vector<double> col_lower, col_upper, objective;
  std::vector<char> integer;
  std::vector<double> row_lower, row_upper;
  std::vector<std::vector<std::pair<int, double>>> columns;  // per column: (row, value)

  int AddCol(double lower, double upper, double obj, bool is_integer) {
    col_lower.push_back(CbcBound(lower));
    col_upper.push_back(CbcBound(upper));
    objective.push_back(obj);
    integer.push_back(is_integer ? 1 : 0);
    columns.emplace_back();
    return static_cast<int>(columns.size()) - 1;
  }
  int AddRow(double lower, double upper) {
    row_lower.push_back(CbcBound(lower));
    row_upper.push_back(CbcBound(upper));
    return static_cast<int>(row_lower.size()) - 1;
  }
  void AddElement(int row, int col, double value) {
    if (value != 0.0) columns[static_cast<std::size_t>(col)].emplace_back(row, value);
  }
};

// Empty if every finite bound, right-hand side and breakpoint of `model` is below
// kCbcLargestMagnitude in magnitude; otherwise a message naming the first that is not.
std::string FindValueBeyondCbcRange(const Model& model) {
  std::ostringstream why;
  const auto too_large = [](double value) {
    return std::isfinite(value) && std::abs(value) >= kCbcLargestMagnitude;
  };
  const auto report = [&](const std::string& what, double value) {
    why << what << " is " << value << ": CBC's LP solver (Clp) treats finite values from "
        << kCbcLargestMagnitude << " in magnitude as infinite and returns wrong answers for them; "
        << "rescale the model or use the glpk backend";
    return why.str();
  };
  for (int j = 0; j < model.num_vars(); ++j) {
    const VarData& v = model.var(j);
    if (too_large(v.lower)) return report("variable '" + v.name + "': lower bound", v.lower);
    if (too_large(v.upper)) return report("variable '" + v.name + "': upper bound", v.upper);
  }
  for (int i = 0; i < model.num_constraints(); ++i) {
    const RowData& r = model.constraint(i);
    if (too_large(r.lower)) return report("constraint '" + r.name + "': lower bound", r.lower);
    if (too_large(r.upper)) return report("constraint '" + r.name + "': upper bound", r.upper);
  }
  for (const PiecewiseLinearData& f : model.piecewise_linear()) {
    for (std::size_t k = 0; k < f.xs.size(); ++k) {
      const std::string point = "piecewise-linear '" + f.name + "': point " + std::to_string(k);
      if (too_large(f.xs[k])) return report(point + " x", f.xs[k]);
      if (too_large(f.ys[k])) return report(point + " y", f.ys[k]);
    }
  }
  return {};
}

static_assert(kCbcArtificialBound == 1e14, "the messages below name the bound");

// True if a variable of `model` with an infinite bound sits at the artificial bound that replaced it.
bool AtArtificialBound(const Model& model, const std::vector<double>& values) {
  const double at = kCbcArtificialBound * (1.0 - 1e-9);
  for (int j = 0; j < model.num_vars(); ++j) {
    const VarData& v = model.var(j);
    const double x = values[static_cast<std::size_t>(j)];
    if ((std::isinf(v.lower) && x <= -at) || (std::isinf(v.upper) && x >= at)) return true;
  }
  return false;
}

// The model's variables for CBC; infinite bounds become +-artificial_bound when that is finite.
Formulation Formulate(const Model& model, bool zero_objective, double artificial_bound) {
  Formulation f;
  std::vector<double> objective(static_cast<std::size_t>(model.num_vars()), 0.0);
  if (!zero_objective) {
    const RowData& obj = model.objective();
    for (std::size_t k = 0; k < obj.vars.size(); ++k)
      objective[static_cast<std::size_t>(obj.vars[k])] = obj.coefs[k];
  }
  bool any_integer = false;
  for (int j = 0; j < model.num_vars(); ++j) {
    const VarData& v = model.var(j);
    const bool is_integer = v.type != VarType::kContinuous;
    any_integer = any_integer || is_integer;
    f.AddCol(std::max(v.lower, -artificial_bound), std::min(v.upper, artificial_bound),
             objective[static_cast<std::size_t>(j)], is_integer);
  }
  for (int i = 0; i < model.num_constraints(); ++i) {
    const RowData& r = model.constraint(i);
    const int row = f.AddRow(r.lower, r.upper);
    for (std::size_t k = 0; k < r.vars.size(); ++k) f.AddElement(row, r.vars[k], r.coefs[k]);
  }
  for (const PiecewiseLinearData& pwl : model.piecewise_linear()) {
    internal::AddIncrementalPiecewiseLinear(f, pwl, pwl.x, pwl.y);
    any_integer = any_integer || pwl.xs.size() > 2;
  }
  // Cbc_solve treats a model without integer columns as an LP (ignoring the time limit): give it one integer
  // column fixed at 0 so branch and bound always runs.
  if (!any_integer) f.AddCol(0.0, 0.0, 0.0, true);
  return f;
}

CbcPtr Load(const Formulation& f, Sense sense, const SolveOptions& options, double seconds,
            bool has_piecewise) {
  std::vector<int> starts{0}, index;
  std::vector<double> value;
  for (const auto& column : f.columns) {
    for (const auto& [row, v] : column) {
      index.push_back(row);
      value.push_back(v);
    }
    starts.push_back(static_cast<int>(index.size()));
  }
  CbcPtr model(Cbc_newModel());
  Cbc_loadProblem(model.get(), static_cast<int>(f.columns.size()), static_cast<int>(f.row_lower.size()),
                  starts.data(), index.data(), value.data(), f.col_lower.data(), f.col_upper.data(),
                  f.objective.data(), f.row_lower.data(), f.row_upper.data());
  for (std::size_t j = 0; j < f.integer.size(); ++j) {
    if (f.integer[j] != 0) Cbc_setInteger(model.get(), static_cast<int>(j));
  }
  Cbc_setObjSense(model.get(), sense == Sense::kMaximize ? -1.0 : 1.0);
  const std::string log = options.verbose ? "1" : "0";
  Cbc_setParameter(model.get(), "log", log.c_str());
  Cbc_setParameter(model.get(), "slog", log.c_str());
  Cbc_setLogLevel(model.get(), options.verbose ? 1 : 0);
  if (!std::isinf(seconds)) {
    Cbc_setParameter(model.get(), "timeMode", "elapsed");
    Cbc_setParameter(model.get(), "seconds", internal::FormatNumber(seconds).c_str());
  }
  Cbc_setParameter(model.get(), "ratioGap", internal::FormatNumber(options.relative_gap).c_str());
  Cbc_setParameter(model.get(), "allowableGap", "0");
  if (options.presolve) {
    // CBC 2.10's Cgl preprocessing is wrong on piecewise-linear formulations: with SOS2 sets it
    // returned points that break the model's rows (coin-or/Cbc#283, #449; 75 of 2,000 allocation
    // MILPs in tests/cpp/alloc), and with the incremental formulation it "proves" infeasible a
    // feasible model (y = f(x) of a zigzag f with x fixed at a breakpoint, minimising y). Models with
    // piecewise-linear terms therefore keep only LP presolve; the others use mode "on".
    Cbc_setParameter(model.get(), "preprocess", has_piecewise ? "off" : "on");
  } else {
    Cbc_setParameter(model.get(), "presolve", "off");
    Cbc_setParameter(model.get(), "preprocess", "off");
  }
  return model;
}

// Runs CbcMain1 (serialised, except in the single-threaded child of an isolated solve, where a
// parent thread may have held the mutex at the fork); returns false if it threw.
bool RunCbc(Cbc_Model* model, std::string* error) {
  std::unique_lock<std::mutex> lock(CbcMutex(), std::defer_lock);
  if (!internal::InIsolatedChild()) lock.lock();
  const SigintGuard sigint;
  try {
    Cbc_solve(model);
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
  } catch (...) {
    *error = "unknown exception from CBC";
  }
  return false;
}

class CbcBackend final : public Backend {
 public:
  std::string name() const override { return "cbc"; }

  Result Solve(const Model& model, const SolveOptions& options) const override {
    // CBC offers no hook to poll SolveOptions::interrupt from, so a solve that has one runs isolated,
    // where the waiting parent polls it and stops the child.
    SolveOptions effective = options;
    if (effective.interrupt && !internal::InIsolatedChild()) effective.isolate = true;
    return internal::SolveFrame(name(), model, effective,
                                [&](const SolveOptions& opts, const Stopwatch& clock, Result* result) {
                                  const std::string beyond = FindValueBeyondCbcRange(model);
                                  if (!beyond.empty()) {
                                    result->termination = Termination::kError;
                                    result->message = beyond;
                                    return;
                                  }
                                  SolveInto(model, opts, clock, result, kInf);
                                  ConfirmInfeasible(model, opts, clock, result);
                                  RetryWithoutPreprocessing(model, opts, clock, result);
                                });
  }

 private:
  static double Remaining(const SolveOptions& options, const Stopwatch& clock) {
    return std::isinf(options.time_limit_s) ? kInf : options.time_limit_s - clock.ElapsedSeconds();
  }

  // `artificial_bound` (kInf or kCbcArtificialBound) replaces the variables' infinite bounds.
  static void SolveInto(const Model& model, const SolveOptions& options, const Stopwatch& clock,
                        Result* result, double artificial_bound) {
    const double unbounded_bound = model.sense() == Sense::kMaximize ? kInf : -kInf;
    const Formulation formulation = Formulate(model, false, artificial_bound);
    const double seconds = Remaining(options, clock);
    if (seconds <= 0) {
      result->termination = Termination::kTimeLimit;
      result->message = "time limit reached before CBC started";
      result->best_bound = unbounded_bound;
      result->gap = kInf;
      return;
    }
    CbcPtr cbc = Load(formulation, model.sense(), options, seconds, !model.piecewise_linear().empty());
    std::string error;
    if (!RunCbc(cbc.get(), &error)) {
      result->termination = Termination::kError;
      result->message = "CBC failed: " + error;
      return;
    }
    const int status = Cbc_status(cbc.get());
    const int secondary = Cbc_secondaryStatus(cbc.get());
    const double* best = Cbc_bestSolution(cbc.get());
    const std::string codes =
        " (CBC status " + std::to_string(status) + ", secondary " + std::to_string(secondary) + ")";
    if (best != nullptr) {
      result->has_solution = true;
      result->values.assign(best, best + model.num_vars());
      // Integer variables come back within CBC's integrality tolerance: report the integer.
      for (int j = 0; j < model.num_vars(); ++j) {
        if (model.var(j).type != VarType::kContinuous) {
          result->values[static_cast<std::size_t>(j)] =
              std::round(result->values[static_cast<std::size_t>(j)]);
        }
      }
      result->objective = ObjectiveOf(model, result->values);
      result->best_bound = Cbc_getBestPossibleObjValue(cbc.get()) + model.objective_constant();
      // The bound is never on the wrong side of the incumbent.
      if (model.sense() == Sense::kMaximize) {
        result->best_bound = std::max(result->best_bound, result->objective);
      } else {
        result->best_bound = std::min(result->best_bound, result->objective);
      }
    } else {
      result->best_bound = unbounded_bound;
    }
    result->gap = result->has_solution ? internal::RelativeGap(result->best_bound, result->objective) : kInf;

    if (Cbc_isContinuousUnbounded(cbc.get()) != 0 || secondary == 7) {
      return ClassifyUnbounded(model, options, clock, result, artificial_bound);
    }
    if (Cbc_isProvenInfeasible(cbc.get()) != 0 || secondary == 1) {
      result->termination = Termination::kInfeasible;
      result->message = "proven infeasible" + codes;
      result->has_solution = false;
      result->values.clear();
      return;
    }
    if (status == 0 && best != nullptr && (secondary == 0 || secondary == 2 || secondary == -1)) {
      result->termination = Termination::kOptimal;
      result->message = (secondary == 2 ? "optimal within the relative gap" : "optimal") + codes;
      if (secondary != 2) result->best_bound = result->objective, result->gap = 0.0;
      return;
    }
    if (Cbc_isSecondsLimitReached(cbc.get()) != 0 || secondary == 4) {
      result->termination = Termination::kTimeLimit;
      result->message = (best != nullptr ? "time limit reached with a feasible solution"
                                         : "time limit reached before a feasible solution was found") +
                        codes;
      return;
    }
    result->termination = Termination::kError;
    result->message =
        (status == 2 ? "CBC abandoned the search (numerical difficulties)" : "CBC stopped") + codes;
  }

  // CBC's preprocessing has been seen to "prove" a feasible model infeasible (see Load). An
  // infeasibility found with preprocessing is confirmed by a solve without it.
  static void ConfirmInfeasible(const Model& model, const SolveOptions& options, const Stopwatch& clock,
                                Result* result) {
    if (result->termination != Termination::kInfeasible || !options.presolve) return;
    SolveOptions plain = options;
    plain.presolve = false;
    Result retry;
    retry.backend = result->backend;
    retry.model_id = result->model_id;
    SolveInto(model, plain, clock, &retry, kInf);
    if (retry.termination == Termination::kInfeasible) return;
    retry.message += " (solved again without preprocessing, which had reported the model infeasible)";
    *result = std::move(retry);
  }

  // CBC has been seen to call a point optimal that breaks the model (see Load): solve once more
  // without preprocessing. If that point is wrong too, the first one stays, and SolveFrame reports
  // it as an error (internal::RejectPointThatBreaksModel).
  static void RetryWithoutPreprocessing(const Model& model, const SolveOptions& options,
                                        const Stopwatch& clock, Result* result) {
    if (!result->has_solution) return;
    const std::string violation = internal::FindViolation(model, result->values);
    if (violation.empty() || !options.presolve) return;
    SolveOptions plain = options;
    plain.presolve = false;
    Result retry;
    retry.backend = result->backend;
    retry.model_id = result->model_id;
    SolveInto(model, plain, clock, &retry, kInf);
    if (retry.has_solution && !internal::FindViolation(model, retry.values).empty()) return;
    retry.message +=
        " (solved again without preprocessing: the first point broke the model: " + violation + ")";
    *result = std::move(retry);
  }

  static double ObjectiveOf(const Model& model, const std::vector<double>& values) {
    double total = model.objective_constant();
    const RowData& obj = model.objective();
    for (std::size_t k = 0; k < obj.vars.size(); ++k)
      total += obj.coefs[k] * values[static_cast<std::size_t>(obj.vars[k])];
    return total;
  }

  // CBC found the LP relaxation unbounded: the problem is unbounded if it has a feasible solution,
  // else infeasible. Find out by solving it again with a zero objective. A feasible model is solved
  // once more with its infinite bounds replaced by kCbcArtificialBound, as Clp may have lost an optimum
  // (bft/milp_cbc.h): if no variable sits at an artificial bound, that optimum is the answer. Both
  // solves run with presolve: without it, CBC's search on a zero objective over unbounded integer
  // variables ran past its time limit.
  static void ClassifyUnbounded(const Model& model, const SolveOptions& options, const Stopwatch& clock,
                                Result* result, double artificial_bound) {
    result->has_solution = false;
    result->values.clear();
    result->best_bound = model.sense() == Sense::kMaximize ? kInf : -kInf;
    result->gap = kInf;
    SolveOptions with_presolve = options;
    with_presolve.presolve = true;
    const double seconds = Remaining(options, clock);
    int feasible = -1;  // unknown
    if (seconds > 0) {
      const Formulation formulation = Formulate(model, true, artificial_bound);
      CbcPtr cbc =
          Load(formulation, Sense::kMinimize, with_presolve, seconds, !model.piecewise_linear().empty());
      std::string error;
      if (RunCbc(cbc.get(), &error)) {
        if (Cbc_bestSolution(cbc.get()) != nullptr) {
          feasible = 1;
        } else if (Cbc_isProvenInfeasible(cbc.get()) != 0 || Cbc_secondaryStatus(cbc.get()) == 1) {
          feasible = 0;
        }
      }
    }
    if (feasible == 0) {
      result->termination = Termination::kInfeasible;
      result->message = "infeasible (the LP relaxation is unbounded but no feasible point exists)";
    } else if (feasible == 1) {
      if (std::isinf(artificial_bound)) {
        Result boxed;
        boxed.backend = result->backend;
        boxed.model_id = result->model_id;
        SolveInto(model, with_presolve, clock, &boxed, kCbcArtificialBound);
        if (boxed.termination == Termination::kOptimal && !AtArtificialBound(model, boxed.values)) {
          boxed.message +=
              " (CBC had reported the objective unbounded; solved again with the infinite variable "
              "bounds replaced by +-1e14 (kCbcArtificialBound), none of which is reached)";
          *result = std::move(boxed);
          return;
        }
      }
      result->termination = Termination::kUnbounded;
      result->message =
          "the objective is unbounded (a feasible solution exists; no optimum has the unbounded "
          "variables within +-1e14, kCbcArtificialBound)";
    } else {
      result->termination = Termination::kInfeasibleOrUnbounded;
      result->message = "infeasible or unbounded (the LP relaxation is unbounded; feasibility not decided)";
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakeCbcBackend() { return std::make_unique<CbcBackend>(); }

void RegisterCbcBackend() { RegisterBackend("cbc", MakeCbcBackend); }

}  // namespace bft::milp
