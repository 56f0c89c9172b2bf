// bft::milp — a small, solver-agnostic mixed-integer linear programming model.
//
// Build a Model (variables, linear constraints, piecewise-linear functions, an objective), then
// hand it to a Backend (GLPK, CBC) through Solve(). The model knows nothing of any solver; each
// backend maps it to its own library (both get an exact binary formulation of piecewise-linear
// terms). Bad input throws bft::InvalidArgument naming the variable or constraint at the
// moment it is added, so a model that exists is always valid to hand to any backend.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bft/error.h"

namespace bft::milp {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The magnitudes a model may hold, checked when a variable, row, piecewise-linear function or
// objective is added: every non-zero coefficient (after merging terms, including the segment
// slopes' rises and runs of a piecewise-linear function) lies in [kMinMagnitude, kMaxMagnitude] in
// absolute value, and every finite bound, right-hand side and breakpoint in [-kMaxMagnitude,
// kMaxMagnitude]. Outside them the solvers fail in ways no result can report: GLPK aborts the
// process (a coefficient of 1e-200: "glp_set_rii: invalid scale factor"), CBC aborts on an
// objective coefficient of 1e25 (an assertion in Clp) and reads 1e30 as infinity.
inline constexpr double kMaxMagnitude = 1e20;
inline constexpr double kMinMagnitude = 1e-30;

enum class VarType { kContinuous, kInteger, kBinary };
enum class Sense { kMaximize, kMinimize };

class Model;

// A handle to a variable of one model: cheap to copy, compared by (model, index).
class Var {
 public:
  Var() = default;
  int index() const { return index_; }
  // Identity of the owning model (never reused within a process); 0 for a default-constructed Var.
  std::uint64_t model_id() const { return model_id_; }
  bool operator==(const Var& other) const { return model_id_ == other.model_id_ && index_ == other.index_; }
  bool operator!=(const Var& other) const { return !(*this == other); }

 private:
  friend class Model;
  Var(std::uint64_t model_id, int index) : model_id_(model_id), index_(index) {}
  std::uint64_t model_id_ = 0;
  int index_ = -1;
};

// A linear expression sum(coef * var) + constant. Terms on the same variable are merged when the
// expression is added to a model. Mixing variables of two models throws bft::InvalidArgument.
class LinExpr {
 public:
  LinExpr() = default;
  LinExpr(double constant) : constant_(constant) {}  // NOLINT: implicit on purpose (2*x + 3)
  LinExpr(Var var) { AddTerm(var, 1.0); }            // NOLINT: implicit on purpose (x + y)

  LinExpr& AddTerm(Var var, double coef);
  LinExpr& operator+=(const LinExpr& other);
  LinExpr& operator-=(const LinExpr& other);
  LinExpr& operator*=(double factor);

  const std::vector<std::pair<Var, double>>& terms() const { return terms_; }
  double constant() const { return constant_; }
  // Identity of the model its variables belong to; 0 for a constant expression.
  std::uint64_t model_id() const { return model_id_; }

 private:
  std::vector<std::pair<Var, double>> terms_;
  double constant_ = 0.0;
  std::uint64_t model_id_ = 0;
};

LinExpr operator+(LinExpr a, const LinExpr& b);
LinExpr operator-(LinExpr a, const LinExpr& b);
LinExpr operator-(LinExpr a);
LinExpr operator*(double factor, LinExpr a);
LinExpr operator*(LinExpr a, double factor);

// lower <= expr <= upper, either side possibly infinite. Made by comparing expressions:
// `2*x + 3*y <= 10`, `x - y >= 0`, `x + y == 1`.
struct LinConstraint {
  LinExpr expr;
  double lower = -kInf;
  double upper = kInf;
};
LinConstraint operator<=(const LinExpr& lhs, const LinExpr& rhs);
LinConstraint operator>=(const LinExpr& lhs, const LinExpr& rhs);
LinConstraint operator==(const LinExpr& lhs, const LinExpr& rhs);

// A handle to a constraint of one model.
struct ConstraintRef {
  std::uint64_t model_id = 0;
  int index = -1;
};

// Variable data as stored in the model.
struct VarData {
  std::string name;
  VarType type = VarType::kContinuous;
  double lower = 0.0;
  double upper = kInf;
};

// A linear row as stored: variables merged and sorted by index, constant moved into the bounds.
struct RowData {
  std::string name;
  std::vector<int> vars;
  std::vector<double> coefs;
  double lower = -kInf;
  double upper = kInf;
};

// y = f(x) for f piecewise linear through (xs[k], ys[k]), x restricted to [xs.front(), xs.back()].
// Semantics are SOS2: x and y are the same convex combination of two adjacent breakpoints, so
// non-concave f is represented exactly (a backend must never convexify it).
struct PiecewiseLinearData {
  std::string name;
  int x = -1;  // variable indices
  int y = -1;
  std::vector<double> xs;  // strictly increasing, at least two
  std::vector<double> ys;
};

class Model {
 public:
  explicit Model(std::string name = "bft");
  Model(const Model&);  // a copy is a new model: handles of the original do not refer to it
  Model& operator=(const Model&);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::string& name() const;
  std::uint64_t id() const;

  // Variables. Throws InvalidArgument on NaN bounds, lower > upper, lower == +inf, upper == -inf,
  // fractional bounds on an integer variable, or a duplicate non-empty name.
  // An empty name gets an automatic one ("x12").
  Var AddVar(double lower, double upper, VarType type, std::string name = "");
  Var AddContinuous(double lower, double upper, std::string name = "");
  Var AddInteger(double lower, double upper, std::string name = "");
  Var AddBinary(std::string name = "");

  // Constraints. Throws InvalidArgument naming the constraint on NaN/inf coefficients, NaN bounds,
  // lower > upper, or a variable of another model.
  ConstraintRef AddConstraint(const LinConstraint& constraint, std::string name = "");
  ConstraintRef AddConstraint(const LinExpr& expr, double lower, double upper, std::string name = "");

  // y = f(x) through the breakpoints (see PiecewiseLinearData); returns y, a new continuous
  // variable bounded by [min ys, max ys]. Throws InvalidArgument on fewer than two breakpoints,
  // breakpoints not strictly increasing, non-finite values, sizes that differ, or x of another model.
  Var AddPiecewiseLinear(Var x, std::vector<double> xs, std::vector<double> ys, std::string name = "");

  // Objective. Throws InvalidArgument on NaN/inf coefficients or variables of another model.
  void SetObjective(const LinExpr& objective, Sense sense);
  void Maximize(const LinExpr& objective) { SetObjective(objective, Sense::kMaximize); }
  void Minimize(const LinExpr& objective) { SetObjective(objective, Sense::kMinimize); }

  // Read access, for backends and exporters.
  int num_vars() const;
  int num_constraints() const;
  const VarData& var(int index) const;
  const RowData& constraint(int index) const;
  const std::vector<PiecewiseLinearData>& piecewise_linear() const;
  Sense sense() const;
  // The objective with terms merged and sorted by variable index.
  const RowData& objective() const;
  double objective_constant() const;
  Var var_handle(int index) const;  // the Var of an index; throws InvalidArgument if out of range
  // Throws InvalidArgument (naming `what`) if `var` does not belong to this model.
  void CheckOwns(Var var, const std::string& what) const;

  // The model as CPLEX-LP text (piecewise-linear terms as SOS2 sets over generated weights).
  std::string ToLpString() const;
  void WriteLp(const std::string& path) const;  // throws bft::Error if the file cannot be written

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Why the solver stopped. Kept separate from Result::has_solution: a time limit may or may not
// leave a feasible solution behind.
enum class Termination {
  kOptimal,     // proven optimal within the relative gap asked for
  kTimeLimit,   // stopped by SolveOptions::time_limit_s
  kInfeasible,  // proven infeasible
  kUnbounded,   // the objective is unbounded: a feasible point exists and the relaxation is unbounded
  kInfeasibleOrUnbounded,  // the relaxation is unbounded; whether a feasible point exists was not
                           // decided (time limit, solver failure)
  kError,                  // the backend failed (or crashed in an isolated solve); see Result::message
  kInterrupted,            // stopped by SolveOptions::interrupt (Python: Ctrl-C)
};
const char* ToString(Termination termination);

// The backend a solve uses when none is named (bft.milp.DEFAULT_BACKEND, alloc's milp_backend).
inline constexpr char kDefaultBackend[] = "glpk";

struct SolveOptions {
  double time_limit_s = kInf;  // wall-clock limit; +inf for none
  double relative_gap = 1e-9;  // stop when |bound - objective| <= gap * max(1, |objective|)
  bool presolve = true;
  bool verbose = false;  // let the backend print its log to stdout
  // Solve in a child process (fork), so that nothing the backend does can end the caller: a crash
  // (a signal, an abort) comes back as Termination::kError naming the signal, and a child that
  // outlives a finite time_limit_s by more than IsolationGraceSeconds(time_limit_s) is killed
  // (Termination::kTimeLimit, no solution). For long-lived callers (the trace replay, a manager).
  bool isolate = false;
  // Polled during the solve; returning true stops it with Termination::kInterrupted (an incumbent,
  // if the backend had one in process, is kept). Called from the solving thread at most every
  // 0.05 s: by GLPK's branch-and-bound callback in process, and, with `isolate`, by the parent
  // while it waits. CBC has no hook to poll it from, so a CBC solve with an interrupt always runs
  // isolated. Must be cheap and must not throw (a throw counts as true).
  std::function<bool()> interrupt;
  // Returns true if valid; otherwise false with the reason in *error (if error is not null).
  bool IsValid(std::string* error) const;
};

// How long an isolated solve may outlive its time limit before it is killed: 5 s plus a quarter
// of the limit (the backends stop on their own at the limit; the grace covers building the problem
// and reporting the result).
double IsolationGraceSeconds(double time_limit_s);

struct Result {
  Termination termination = Termination::kError;
  std::string message;        // human-readable detail from the backend
  std::string backend;        // name of the backend that produced it
  bool has_solution = false;  // values/objective are meaningful only when true
  double objective = 0.0;     // objective value of the solution (objective constant included)
  double best_bound = 0.0;    // best proven bound on the optimum
  double gap = 0.0;           // |best_bound - objective| / max(1, |objective|)
  double wall_time_s = 0.0;
  std::vector<double> values;  // one per model variable, when has_solution
  std::uint64_t model_id = 0;  // Model::id() of the solved model (0: unknown); Value() checks it

  bool optimal() const { return termination == Termination::kOptimal && has_solution; }
  // Value of a variable or expression in the solution. Throws bft::Error if there is no solution.
  double Value(Var var) const;
  double Value(const LinExpr& expr) const;
};

// A solver backend. Implementations must be safe to call from several threads at once, each
// thread with its own Model, and must never let an exception unwind through the C library.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Never throws for solver failures: they come back as Termination::kError with a message.
  // Throws InvalidArgument only if `options` is invalid.
  virtual Result Solve(const Model& model, const SolveOptions& options) const = 0;
};

// Backends by name. The core library knows none: each backend library registers itself when its
// Register*Backend() is called (bft/milp_glpk.h, bft/milp_cbc.h); the Python module registers all
// backends it was built with.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;
void RegisterBackend(const std::string& name, BackendFactory factory);  // replaces an existing one
std::vector<std::string> RegisteredBackends();                          // sorted
// Throws bft::NotAvailable listing the registered backends if `name` is not one of them.
std::unique_ptr<Backend> MakeBackend(const std::string& name);
// MakeBackend(backend)->Solve(model, options).
Result Solve(const Model& model, const std::string& backend, const SolveOptions& options = {});

}  // namespace bft::milp
