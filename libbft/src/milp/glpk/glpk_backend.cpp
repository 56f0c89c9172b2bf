// The GLPK backend of bft::milp.
//
// Piecewise-linear terms: GLPK has no SOS2, so y = f(x) through breakpoints (X_0, Y_0) ... (X_n, Y_n)
// becomes the incremental ("delta") formulation, which is exact for any f (never convexified):
//   x = X_0 + sum_s (X_{s+1} - X_s) d_s,   y = Y_0 + sum_s (Y_{s+1} - Y_s) d_s,   0 <= d_s <= 1,
//   d_{s+1} <= z_s <= d_s for s = 0 .. n-2 with z_s binary.
// Every integer z forces d = (1, ..., 1, t, 0, ..., 0): segments are filled in order, so (x, y) lies
// on exactly one segment of the graph of f. See docs/milp.md.
//
// Safety: the model was validated when it was built, and this file adds only finite coefficients,
// merged rows (no duplicate column in a row), consistent bounds and valid control parameters, so
// GLPK never reaches glp_error (which would abort the process). The search callback only reads
// numbers and cannot throw, so no C++ exception unwinds through GLPK.
//
// Threads: Debian's GLPK 5.0 keeps its environment in thread-local storage (libglpk.so.40 has a
// TLS segment), so solves in different threads share nothing. Each thread that solved frees its
// environment when it exits (glp_free_env), so no memory stays behind.
#include <glpk.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "bft/milp_glpk.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

using internal::Stopwatch;

constexpr int kGlpkMaxDimension = 100000000;       // GLPK's limit on rows and columns (M_MAX, N_MAX)
constexpr long long kGlpkMaxNonZeros = 500000000;  // GLPK's limit on constraint matrix elements

// Frees the calling thread's GLPK environment when the thread ends, if this backend used it.
struct ThreadEnvironment {
  bool used = false;
  ThreadEnvironment() = default;
  ThreadEnvironment(const ThreadEnvironment&) = delete;
  ThreadEnvironment& operator=(const ThreadEnvironment&) = delete;
  ~ThreadEnvironment() {
    if (used) glp_free_env();
  }
};
thread_local ThreadEnvironment thread_environment;

// Restores GLPK's terminal output setting (per thread) on scope exit.
class TerminalOutput {
 public:
  explicit TerminalOutput(bool on) : previous_(glp_term_out(on ? GLP_ON : GLP_OFF)) {}
  ~TerminalOutput() { glp_term_out(previous_); }
  TerminalOutput(const TerminalOutput&) = delete;
  TerminalOutput& operator=(const TerminalOutput&) = delete;

 private:
  int previous_;
};

struct ProbDeleter {
  void operator()(glp_prob* prob) const { glp_delete_prob(prob); }
};
using ProbPtr = std::unique_ptr<glp_prob, ProbDeleter>;

void SetColBounds(glp_prob* prob, int j, double lower, double upper) {
  if (lower == -kInf && upper == kInf) {
    glp_set_col_bnds(prob, j, GLP_FR, 0.0, 0.0);
  } else if (upper == kInf) {
    glp_set_col_bnds(prob, j, GLP_LO, lower, 0.0);
  } else if (lower == -kInf) {
    glp_set_col_bnds(prob, j, GLP_UP, 0.0, upper);
  } else if (lower == upper) {
    glp_set_col_bnds(prob, j, GLP_FX, lower, upper);
  } else {
    glp_set_col_bnds(prob, j, GLP_DB, lower, upper);
  }
}

void SetRowBounds(glp_prob* prob, int i, double lower, double upper) {
  if (lower == -kInf && upper == kInf) {
    glp_set_row_bnds(prob, i, GLP_FR, 0.0, 0.0);
  } else if (upper == kInf) {
    glp_set_row_bnds(prob, i, GLP_LO, lower, 0.0);
  } else if (lower == -kInf) {
    glp_set_row_bnds(prob, i, GLP_UP, 0.0, upper);
  } else if (lower == upper) {
    glp_set_row_bnds(prob, i, GLP_FX, lower, upper);
  } else {
    glp_set_row_bnds(prob, i, GLP_DB, lower, upper);
  }
}

// The GLPK problem in plain arrays (1-based, as GLPK wants them), built before GLPK is touched.
struct Formulation {
  struct Column {
    double lower, upper, objective;
    bool integer;
  };
  struct Row {
    double lower, upper;
  };
  std::vector<Column> cols;
  std::vector<Row> rows;
  std::vector<int> ia{0}, ja{0};  // triplets; index 0 unused
  std::vector<double> ar{0.0};
  bool has_integers = false;

  int AddCol(double lower, double upper, double objective, bool integer) {
    cols.push_back({lower, upper, objective, integer});
    has_integers = has_integers || integer;
    return static_cast<int>(cols.size());  // 1-based
  }
  int AddRow(double lower, double upper) {
    rows.push_back({lower, upper});
    return static_cast<int>(rows.size());
  }
  void AddElement(int row, int col, double value) {
    if (value == 0.0) return;
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(value);
  }
};

Formulation Formulate(const Model& model) {
  Formulation f;
  std::vector<double> objective(static_cast<std::size_t>(model.num_vars()), 0.0);
  const RowData& obj = model.objective();
  for (std::size_t k = 0; k < obj.vars.size(); ++k)
    objective[static_cast<std::size_t>(obj.vars[k])] = obj.coefs[k];
  for (int j = 0; j < model.num_vars(); ++j) {
    const VarData& v = model.var(j);
    f.AddCol(v.lower, v.upper, objective[static_cast<std::size_t>(j)], v.type != VarType::kContinuous);
  }
  for (int i = 0; i < model.num_constraints(); ++i) {
    const RowData& r = model.constraint(i);
    const int row = f.AddRow(r.lower, r.upper);
    for (std::size_t k = 0; k < r.vars.size(); ++k) f.AddElement(row, r.vars[k] + 1, r.coefs[k]);
  }
  // Piecewise-linear terms: the incremental formulation (see the top of this file).
  for (const PiecewiseLinearData& pwl : model.piecewise_linear())
    internal::AddIncrementalPiecewiseLinear(f, pwl, pwl.x + 1, pwl.y + 1);
  return f;
}

// GLPK's MIP presolver loses optima on rows of integer variables whose coefficients span many
// decades: on the knapsack of weights 2^0..2^k under a capacity of 2^k + 3 it called 24 binaries
// optimal for every k from 25 to 30 (span 3.4e7 and up; right up to k = 24), while the search without
// it was right to k = 44. A model with such a row wider than this is solved without it
// (MilpBackendTest.AWideRowKeepsItsOptimum). Rows with a continuous variable keep it: without the
// presolver, GLPK's search failed (GLP_EFAIL) on allocation models whose curves span 1 to 1e8.
constexpr double kPresolveRowSpan = 1e6;

// The largest ratio of two non-zero |coefficients| in one row of f whose variables are all integer
// (1 if there is none with two terms).
double WidestIntegerRowSpan(const Formulation& f) {
  const std::size_t rows = f.rows.size() + 1;
  std::vector<double> lo(rows, std::numeric_limits<double>::infinity()), hi(rows, 0.0);
  std::vector<char> integer(rows, 1);
  for (std::size_t k = 1; k < f.ar.size(); ++k) {
    const auto row = static_cast<std::size_t>(f.ia[k]);
    lo[row] = std::min(lo[row], std::abs(f.ar[k]));
    hi[row] = std::max(hi[row], std::abs(f.ar[k]));
    if (!f.cols[static_cast<std::size_t>(f.ja[k]) - 1].integer) integer[row] = 0;
  }
  double widest = 1.0;
  for (std::size_t row = 1; row < rows; ++row)
    if (integer[row] && hi[row] > 0.0) widest = std::max(widest, hi[row] / lo[row]);
  return widest;
}

// Loads a formulation into a new GLPK problem. Returns null (with *error) when GLPK would refuse it.
ProbPtr Load(const Formulation& f, Sense sense, double objective_constant, std::string* error) {
  if (f.cols.size() > static_cast<std::size_t>(kGlpkMaxDimension) ||
      f.rows.size() > static_cast<std::size_t>(kGlpkMaxDimension) ||
      f.ar.size() - 1 > static_cast<std::size_t>(kGlpkMaxNonZeros)) {
    *error = "the model is larger than GLPK accepts (" + std::to_string(f.cols.size()) + " columns, " +
             std::to_string(f.rows.size()) + " rows, " + std::to_string(f.ar.size() - 1) + " non-zeros)";
    return nullptr;
  }
  ProbPtr prob(glp_create_prob());
  glp_set_obj_dir(prob.get(), sense == Sense::kMaximize ? GLP_MAX : GLP_MIN);
  glp_set_obj_coef(prob.get(), 0, objective_constant);
  if (!f.cols.empty()) glp_add_cols(prob.get(), static_cast<int>(f.cols.size()));
  if (!f.rows.empty()) glp_add_rows(prob.get(), static_cast<int>(f.rows.size()));
  for (std::size_t k = 0; k < f.cols.size(); ++k) {
    const int j = static_cast<int>(k) + 1;
    const auto& c = f.cols[k];
    if (c.integer) glp_set_col_kind(prob.get(), j, GLP_IV);
    SetColBounds(prob.get(), j, c.lower, c.upper);
    glp_set_obj_coef(prob.get(), j, c.objective);
  }
  for (std::size_t k = 0; k < f.rows.size(); ++k) {
    SetRowBounds(prob.get(), static_cast<int>(k) + 1, f.rows[k].lower, f.rows[k].upper);
  }
  glp_load_matrix(prob.get(), static_cast<int>(f.ar.size() - 1), f.ia.data(), f.ja.data(), f.ar.data());
  return prob;
}

// What the branch-and-bound search callback records: the best bound of the open nodes; and the
// interrupt it polls (SolveOptions::interrupt).
struct SearchState {
  bool have_bound = false;
  double bound = 0.0;
  internal::InterruptPoller* interrupt = nullptr;
  bool interrupted = false;
};

extern "C" void RecordBestBound(glp_tree* tree, void* info) noexcept {
  auto* state = static_cast<SearchState*>(info);
  if (!state->interrupted && state->interrupt->Requested()) {
    state->interrupted = true;
    glp_ios_terminate(tree);
  }
  const int node = glp_ios_best_node(tree);
  if (node != 0) {
    state->bound = glp_ios_node_bound(tree, node);
    state->have_bound = true;
  }
}

// Milliseconds GLPK may still use, or -1 if the limit has been reached.
int RemainingMs(const SolveOptions& options, const Stopwatch& clock) {
  if (std::isinf(options.time_limit_s)) return INT_MAX;
  const double left_s = options.time_limit_s - clock.ElapsedSeconds();
  if (left_s <= 0.0) return -1;
  const double ms = std::ceil(left_s * 1000.0);
  return ms >= static_cast<double>(INT_MAX) ? INT_MAX : std::max(1, static_cast<int>(ms));
}

std::string GlpkCodeName(int code) {
  switch (code) {
    case GLP_EBADB:
      return "invalid initial basis (GLP_EBADB)";
    case GLP_ESING:
      return "singular basis matrix (GLP_ESING)";
    case GLP_ECOND:
      return "ill-conditioned basis matrix (GLP_ECOND)";
    case GLP_EBOUND:
      return "incorrect bounds (GLP_EBOUND)";
    case GLP_EFAIL:
      return "solver failure (GLP_EFAIL)";
    case GLP_EROOT:
      return "no optimal basis for the root LP (GLP_EROOT)";
    case GLP_ESTOP:
      return "search terminated (GLP_ESTOP)";
    case GLP_EITLIM:
      return "iteration limit (GLP_EITLIM)";
    default:
      return "GLPK return code " + std::to_string(code);
  }
}

class GlpkBackend final : public Backend {
 public:
  std::string name() const override { return "glpk"; }

  Result Solve(const Model& model, const SolveOptions& options) const override {
    return internal::SolveFrame(name(), model, options,
                                [&](const SolveOptions& opts, const Stopwatch& clock, Result* result) {
                                  SolveInto(model, opts, clock, result);
                                });
  }

 private:
  static void SolveInto(const Model& model, const SolveOptions& options, const Stopwatch& clock,
                        Result* result) {
    const Formulation formulation = Formulate(model);
    thread_environment.used = true;
    const TerminalOutput terminal(options.verbose);
    std::string error;
    ProbPtr prob = Load(formulation, model.sense(), model.objective_constant(), &error);
    if (!prob) {
      result->termination = Termination::kError;
      result->message = error;
      return;
    }
    const int msg_lev = options.verbose ? GLP_MSG_ON : GLP_MSG_OFF;

    if (formulation.cols.empty()) {  // nothing to decide: feasible iff every (empty) row admits 0
      for (const auto& row : formulation.rows) {
        if (row.lower > 0.0 || row.upper < 0.0) {
          result->termination = Termination::kInfeasible;
          result->message = "a constraint without variables excludes 0";
          return;
        }
      }
      SetOptimal(model.objective_constant(), model.objective_constant(), {}, "empty model", result);
      return;
    }

    const bool presolve = options.presolve && WidestIntegerRowSpan(formulation) <= kPresolveRowSpan;
    if (!presolve) {
      // glp_intopt without its presolver needs an optimal basis of the LP relaxation first.
      glp_smcp smcp;
      glp_init_smcp(&smcp);
      smcp.msg_lev = msg_lev;
      const int ms = RemainingMs(options, clock);
      if (ms < 0) return SetTimeLimit("time limit reached before the LP relaxation", model.sense(), result);
      smcp.tm_lim = ms;
      const int ret = glp_simplex(prob.get(), &smcp);
      if (ret == GLP_ETMLIM)
        return SetTimeLimit("time limit reached while solving the LP relaxation", model.sense(), result);
      const int status = glp_get_status(prob.get());
      if (ret == 0 && status == GLP_NOFEAS) {
        result->termination = Termination::kInfeasible;
        result->message = "the LP relaxation is infeasible";
        return;
      }
      if (ret == 0 && status == GLP_UNBND)
        return ClassifyUnbounded(prob.get(), model.sense(), options, clock, result);
      if (ret != 0 || status != GLP_OPT) {
        result->termination = Termination::kError;
        result->message = "glp_simplex failed on the LP relaxation: " + GlpkCodeName(ret);
        return;
      }
    }

    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = msg_lev;
    iocp.presolve = presolve ? GLP_ON : GLP_OFF;
    iocp.mip_gap = options.relative_gap;
    internal::InterruptPoller interrupt(&options.interrupt);
    SearchState state;
    state.interrupt = &interrupt;
    iocp.cb_func = RecordBestBound;
    iocp.cb_info = &state;
    const int ms = RemainingMs(options, clock);
    if (ms < 0)
      return SetTimeLimit("time limit reached before the branch-and-bound search", model.sense(), result);
    iocp.tm_lim = ms;
    const int ret = glp_intopt(prob.get(), &iocp);
    const int status = glp_mip_status(prob.get());
    const bool feasible = status == GLP_OPT || status == GLP_FEAS;

    switch (ret) {
      case 0:
      case GLP_EMIPGAP:
        if (status == GLP_NOFEAS) {
          result->termination = Termination::kInfeasible;
          result->message = "no integer feasible solution exists";
          return;
        }
        if (!feasible) break;
        {
          const double objective = glp_mip_obj_val(prob.get());
          // An exhausted tree proves the incumbent optimal; a gap stop leaves the last open-node bound.
          const double bound = (ret == GLP_EMIPGAP && state.have_bound) ? state.bound : objective;
          SetOptimal(objective, bound, ColumnValues(prob.get(), model.num_vars()),
                     ret == 0 ? "integer optimal" : "optimal within the relative gap", result);
        }
        return;
      case GLP_ETMLIM:
        result->termination = Termination::kTimeLimit;
        result->message = feasible ? "time limit reached with a feasible solution"
                                   : "time limit reached before a feasible solution was found";
        if (feasible) {
          result->has_solution = true;
          result->objective = glp_mip_obj_val(prob.get());
          result->values = ColumnValues(prob.get(), model.num_vars());
        }
        result->best_bound =
            state.have_bound ? state.bound : (model.sense() == Sense::kMaximize ? kInf : -kInf);
        result->gap = feasible ? internal::RelativeGap(result->best_bound, result->objective) : kInf;
        return;
      case GLP_ESTOP:
        if (!state.interrupted) break;
        result->termination = Termination::kInterrupted;
        result->message =
            feasible ? "interrupted with a feasible solution" : "interrupted before a feasible solution";
        if (feasible) {
          result->has_solution = true;
          result->objective = glp_mip_obj_val(prob.get());
          result->values = ColumnValues(prob.get(), model.num_vars());
        }
        result->best_bound =
            state.have_bound ? state.bound : (model.sense() == Sense::kMaximize ? kInf : -kInf);
        result->gap = feasible ? internal::RelativeGap(result->best_bound, result->objective) : kInf;
        return;
      case GLP_ENOPFS:
        result->termination = Termination::kInfeasible;
        result->message = "the LP relaxation is infeasible (found by the presolver)";
        return;
      case GLP_ENODFS:
        return ClassifyUnbounded(prob.get(), model.sense(), options, clock, result);
      default:
        break;
    }
    result->termination = Termination::kError;
    result->message = "glp_intopt: " + GlpkCodeName(ret) + ", MIP status " + std::to_string(status);
  }

  static std::vector<double> ColumnValues(glp_prob* prob, int num_vars) {
    std::vector<double> values(static_cast<std::size_t>(num_vars));
    for (int j = 0; j < num_vars; ++j) values[static_cast<std::size_t>(j)] = glp_mip_col_val(prob, j + 1);
    return values;
  }

  static void SetOptimal(double objective, double bound, std::vector<double> values, const char* message,
                         Result* result) {
    result->termination = Termination::kOptimal;
    result->message = message;
    result->has_solution = true;
    result->objective = objective;
    result->best_bound = bound;
    result->gap = internal::RelativeGap(bound, objective);
    result->values = std::move(values);
  }

  static void SetTimeLimit(const char* message, Sense sense, Result* result) {
    result->termination = Termination::kTimeLimit;
    result->message = message;
    result->best_bound = sense == Sense::kMaximize ? kInf : -kInf;
    result->gap = kInf;
  }

  // The LP relaxation has no dual feasible solution: the problem is unbounded if it has any
  // feasible solution, else infeasible. Find out by solving it again with a zero objective.
  static void ClassifyUnbounded(glp_prob* prob, Sense sense, const SolveOptions& options,
                                const Stopwatch& clock, Result* result) {
    const int n = glp_get_num_cols(prob);
    for (int j = 0; j <= n; ++j) glp_set_obj_coef(prob, j, 0.0);
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = options.verbose ? GLP_MSG_ON : GLP_MSG_OFF;
    iocp.presolve = GLP_ON;
    const int ms = RemainingMs(options, clock);
    int ret = GLP_ETMLIM;
    if (ms >= 0) {
      iocp.tm_lim = ms;
      ret = glp_intopt(prob, &iocp);
    }
    const int status = glp_mip_status(prob);
    result->best_bound = sense == Sense::kMaximize ? kInf : -kInf;
    result->gap = kInf;
    if (ret == GLP_ENOPFS || (ret == 0 && status == GLP_NOFEAS)) {
      result->termination = Termination::kInfeasible;
      result->message = "infeasible (the LP relaxation has no dual feasible solution and no feasible point)";
    } else if ((ret == 0 || ret == GLP_EMIPGAP) && (status == GLP_OPT || status == GLP_FEAS)) {
      result->termination = Termination::kUnbounded;
      result->message =
          "the objective is unbounded (a feasible solution exists and the LP relaxation is unbounded)";
    } else {
      result->termination = Termination::kInfeasibleOrUnbounded;
      result->message = "infeasible or unbounded (the LP relaxation is unbounded; feasibility not decided: " +
                        GlpkCodeName(ret) + ")";
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakeGlpkBackend() { return std::make_unique<GlpkBackend>(); }

void RegisterGlpkBackend() { RegisterBackend("glpk", MakeGlpkBackend); }

}  // namespace bft::milp
