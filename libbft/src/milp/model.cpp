// bft::milp model: variables, linear expressions and constraints, piecewise-linear functions, the
// objective; validation of everything a user hands in; results; the backend registry.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "bft/milp.h"
#include "milp/internal.h"

namespace bft::milp {

// ----------------------------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------------------------

std::string internal::FormatNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

namespace {

using internal::FormatNumber;

std::uint64_t NextModelId() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::string Quote(const std::string& name) { return "'" + name + "'"; }

// Throws InvalidArgument if two expressions (or an expression and a variable) belong to different models.
void CheckSameModel(std::uint64_t a, std::uint64_t b, const char* where) {
  if (a != 0 && b != 0 && a != b) {
    std::ostringstream os;
    os << where << ": the expression mixes variables of two models (model ids " << a << " and " << b << ")";
    throw InvalidArgument(os.str());
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// LinExpr
// ----------------------------------------------------------------------------------------------

LinExpr& LinExpr::AddTerm(Var var, double coef) {
  if (var.model_id() == 0) {
    throw InvalidArgument(
        "linear expression: the variable is default-constructed (not made by Model::AddVar)");
  }
  CheckSameModel(model_id_, var.model_id(), "linear expression");
  model_id_ = var.model_id();
  terms_.emplace_back(var, coef);
  return *this;
}

LinExpr& LinExpr::operator+=(const LinExpr& other) {
  CheckSameModel(model_id_, other.model_id_, "linear expression");
  if (other.model_id_ != 0) model_id_ = other.model_id_;
  terms_.insert(terms_.end(), other.terms_.begin(), other.terms_.end());
  constant_ += other.constant_;
  return *this;
}

LinExpr& LinExpr::operator-=(const LinExpr& other) {
  CheckSameModel(model_id_, other.model_id_, "linear expression");
  if (other.model_id_ != 0) model_id_ = other.model_id_;
  terms_.reserve(terms_.size() + other.terms_.size());
  for (const auto& [var, coef] : other.terms_) terms_.emplace_back(var, -coef);
  constant_ -= other.constant_;
  return *this;
}

LinExpr& LinExpr::operator*=(double factor) {
  for (auto& term : terms_) term.second *= factor;
  constant_ *= factor;
  return *this;
}

LinExpr operator+(LinExpr a, const LinExpr& b) { return a += b; }
LinExpr operator-(LinExpr a, const LinExpr& b) { return a -= b; }
LinExpr operator-(LinExpr a) { return a *= -1.0; }
LinExpr operator*(double factor, LinExpr a) { return a *= factor; }
LinExpr operator*(LinExpr a, double factor) { return a *= factor; }

LinConstraint operator<=(const LinExpr& lhs, const LinExpr& rhs) { return {lhs - rhs, -kInf, 0.0}; }
LinConstraint operator>=(const LinExpr& lhs, const LinExpr& rhs) { return {lhs - rhs, 0.0, kInf}; }
LinConstraint operator==(const LinExpr& lhs, const LinExpr& rhs) { return {lhs - rhs, 0.0, 0.0}; }

// ----------------------------------------------------------------------------------------------
// Model
// ----------------------------------------------------------------------------------------------

struct Model::Impl {
  std::string name;
  std::uint64_t id = NextModelId();
  std::vector<VarData> vars;
  std::unordered_map<std::string, int> var_names;
  std::vector<RowData> rows;
  std::unordered_map<std::string, int> row_names;
  std::vector<PiecewiseLinearData> pwl;
  Sense sense = Sense::kMinimize;
  RowData objective{"objective", {}, {}, -kInf, kInf};
  double objective_constant = 0.0;

  std::string DescribeVar(int index) const {
    return "variable " + Quote(vars[static_cast<std::size_t>(index)].name);
  }

  // A unique name: `requested` if not empty (throws on a duplicate), else `prefix<n>` made unique.
  static std::string UniqueName(const std::unordered_map<std::string, int>& taken,
                                const std::string& requested, const std::string& prefix, std::size_t n,
                                const char* kind) {
    if (!requested.empty()) {
      if (taken.count(requested) != 0) {
        throw InvalidArgument(std::string("duplicate ") + kind + " name " + Quote(requested));
      }
      return requested;
    }
    std::string name = prefix + std::to_string(n);
    for (int suffix = 1; taken.count(name) != 0; ++suffix) {
      name = prefix + std::to_string(n) + "_" + std::to_string(suffix);
    }
    return name;
  }

  // Merges the terms of `expr` by variable, sorted by index, after checking that each belongs to
  // this model and that every coefficient is finite. Exact zeros are dropped.
  void MergeTerms(const LinExpr& expr, const std::string& what, std::vector<int>* vars_out,
                  std::vector<double>* coefs_out) const {
    std::map<int, double> merged;
    for (const auto& [var, coef] : expr.terms()) {
      CheckOwns(var, what);
      if (!std::isfinite(coef)) {
        throw InvalidArgument(what + ": coefficient of " + DescribeVar(var.index()) + " is " +
                              FormatNumber(coef) + " (coefficients must be finite)");
      }
      merged[var.index()] += coef;
    }
    vars_out->clear();
    coefs_out->clear();
    for (const auto& [index, coef] : merged) {
      if (!std::isfinite(coef)) {
        throw InvalidArgument(what + ": coefficients of " + DescribeVar(index) + " sum to " +
                              FormatNumber(coef));
      }
      if (coef == 0.0) continue;
      CheckCoefficient(coef, what + ": coefficient of " + DescribeVar(index));
      vars_out->push_back(index);
      coefs_out->push_back(coef);
    }
  }

  // Throws InvalidArgument naming `what` if a non-zero coefficient is outside
  // [kMinMagnitude, kMaxMagnitude] in absolute value (see bft/milp.h).
  static void CheckCoefficient(double coef, const std::string& what) {
    const double magnitude = std::abs(coef);
    if (magnitude < kMinMagnitude || magnitude > kMaxMagnitude) {
      throw InvalidArgument(what + " is " + FormatNumber(coef) + " (non-zero coefficients must lie within " +
                            FormatNumber(kMinMagnitude) + " and " + FormatNumber(kMaxMagnitude) +
                            " in absolute value; rescale the model)");
    }
  }

  // Throws InvalidArgument naming `what` if a finite bound or value exceeds kMaxMagnitude.
  static void CheckFiniteMagnitude(double value, const std::string& what) {
    if (std::isfinite(value) && std::abs(value) > kMaxMagnitude) {
      throw InvalidArgument(what + " is " + FormatNumber(value) + " (finite values must lie within +-" +
                            FormatNumber(kMaxMagnitude) + "; use kInf (Python: milp.INF) for no bound)");
    }
  }

  void CheckOwns(Var var, const std::string& what) const {
    if (var.model_id() == 0) {
      throw InvalidArgument(what + ": the variable is default-constructed (not made by Model::AddVar)");
    }
    if (var.model_id() != id) {
      std::ostringstream os;
      os << what << ": variable #" << var.index() << " belongs to another model (model id " << var.model_id()
         << "), not to model " << Quote(name) << " (id " << id << ")";
      throw InvalidArgument(os.str());
    }
    if (var.index() < 0 || var.index() >= static_cast<int>(vars.size())) {
      std::ostringstream os;
      os << what << ": variable index " << var.index() << " is out of range (model " << Quote(name) << " has "
         << vars.size() << " variables)";
      throw InvalidArgument(os.str());
    }
  }
};

Model::Model(std::string name) : impl_(std::make_unique<Impl>()) { impl_->name = std::move(name); }
Model::Model(const Model& other) : impl_(std::make_unique<Impl>(*other.impl_)) { impl_->id = NextModelId(); }
Model& Model::operator=(const Model& other) {
  if (this != &other) {
    auto copy = std::make_unique<Impl>(*other.impl_);
    copy->id = NextModelId();
    impl_ = std::move(copy);
  }
  return *this;
}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const std::string& Model::name() const { return impl_->name; }
std::uint64_t Model::id() const { return impl_->id; }

Var Model::AddVar(double lower, double upper, VarType type, std::string name) {
  Impl& m = *impl_;
  const std::string final_name = Impl::UniqueName(m.var_names, name, "x", m.vars.size(), "variable");
  const std::string what = "variable " + Quote(final_name);
  if (std::isnan(lower) || std::isnan(upper)) {
    throw InvalidArgument(what + ": bounds must not be NaN (lower " + FormatNumber(lower) + ", upper " +
                          FormatNumber(upper) + ")");
  }
  if (lower > upper) {
    throw InvalidArgument(what + ": lower bound " + FormatNumber(lower) + " > upper bound " +
                          FormatNumber(upper));
  }
  if (lower == kInf || upper == -kInf) {
    throw InvalidArgument(what + ": bounds [" + FormatNumber(lower) + ", " + FormatNumber(upper) +
                          "] leave no finite value");
  }
  Impl::CheckFiniteMagnitude(lower, what + ": lower bound");
  Impl::CheckFiniteMagnitude(upper, what + ": upper bound");
  if (type != VarType::kContinuous) {
    for (double bound : {lower, upper}) {
      if (std::isfinite(bound) && bound != std::floor(bound)) {
        throw InvalidArgument(what + ": integer variable has fractional bound " + FormatNumber(bound));
      }
    }
  }
  if (type == VarType::kBinary && (lower < 0.0 || upper > 1.0)) {
    throw InvalidArgument(what + ": binary variable bounds [" + FormatNumber(lower) + ", " +
                          FormatNumber(upper) + "] are not within [0, 1]");
  }
  const int index = static_cast<int>(m.vars.size());
  m.vars.push_back(VarData{final_name, type, lower, upper});
  m.var_names.emplace(final_name, index);
  return Var(m.id, index);
}

Var Model::AddContinuous(double lower, double upper, std::string name) {
  return AddVar(lower, upper, VarType::kContinuous, std::move(name));
}
Var Model::AddInteger(double lower, double upper, std::string name) {
  return AddVar(lower, upper, VarType::kInteger, std::move(name));
}
Var Model::AddBinary(std::string name) { return AddVar(0.0, 1.0, VarType::kBinary, std::move(name)); }

ConstraintRef Model::AddConstraint(const LinConstraint& constraint, std::string name) {
  return AddConstraint(constraint.expr, constraint.lower, constraint.upper, std::move(name));
}

ConstraintRef Model::AddConstraint(const LinExpr& expr, double lower, double upper, std::string name) {
  Impl& m = *impl_;
  RowData row;
  row.name = Impl::UniqueName(m.row_names, name, "c", m.rows.size(), "constraint");
  const std::string what = "constraint " + Quote(row.name);
  if (std::isnan(lower) || std::isnan(upper)) {
    throw InvalidArgument(what + ": bounds must not be NaN (lower " + FormatNumber(lower) + ", upper " +
                          FormatNumber(upper) + ")");
  }
  m.MergeTerms(expr, what, &row.vars, &row.coefs);
  if (!std::isfinite(expr.constant())) {
    throw InvalidArgument(what + ": constant term is " + FormatNumber(expr.constant()) +
                          " (it must be finite; use infinite bounds for a one-sided constraint)");
  }
  row.lower = lower - expr.constant();  // +-inf stays +-inf: the constant is finite
  row.upper = upper - expr.constant();
  if (row.lower > row.upper) {
    throw InvalidArgument(what + ": lower bound " + FormatNumber(row.lower) + " > upper bound " +
                          FormatNumber(row.upper) + " (constant moved to the bounds)");
  }
  if (row.lower == kInf || row.upper == -kInf) {
    throw InvalidArgument(what + ": bounds [" + FormatNumber(row.lower) + ", " + FormatNumber(row.upper) +
                          "] cannot be satisfied");
  }
  Impl::CheckFiniteMagnitude(row.lower, what + ": lower bound (constant moved to the bounds)");
  Impl::CheckFiniteMagnitude(row.upper, what + ": upper bound (constant moved to the bounds)");
  const int index = static_cast<int>(m.rows.size());
  m.row_names.emplace(row.name, index);
  m.rows.push_back(std::move(row));
  return ConstraintRef{m.id, index};
}

Var Model::AddPiecewiseLinear(Var x, std::vector<double> xs, std::vector<double> ys, std::string name) {
  Impl& m = *impl_;
  // The output variable y carries the function's name; check it is free before anything else.
  const std::string final_name = Impl::UniqueName(m.var_names, name, "pwl", m.pwl.size(), "variable");
  const std::string what = "piecewise-linear " + Quote(final_name);
  m.CheckOwns(x, what);
  const std::string where = what + " of " + m.DescribeVar(x.index());
  if (xs.size() != ys.size()) {
    throw InvalidArgument(where + ": " + std::to_string(xs.size()) + " breakpoint xs but " +
                          std::to_string(ys.size()) + " ys");
  }
  if (xs.size() < 2) {
    throw InvalidArgument(where + ": needs at least two breakpoints, got " + std::to_string(xs.size()));
  }
  for (std::size_t k = 0; k < xs.size(); ++k) {
    if (!std::isfinite(xs[k]) || !std::isfinite(ys[k])) {
      throw InvalidArgument(where + ": breakpoint " + std::to_string(k) + " (" + FormatNumber(xs[k]) + ", " +
                            FormatNumber(ys[k]) + ") is not finite");
    }
    if (k > 0 && !(xs[k] > xs[k - 1])) {
      throw InvalidArgument(where + ": breakpoints must be strictly increasing, but xs[" +
                            std::to_string(k - 1) + "] = " + FormatNumber(xs[k - 1]) + " and xs[" +
                            std::to_string(k) + "] = " + FormatNumber(xs[k]));
    }
    const std::string point = where + ": breakpoint " + std::to_string(k);
    Impl::CheckFiniteMagnitude(xs[k], point + " x");
    Impl::CheckFiniteMagnitude(ys[k], point + " y");
    if (k > 0) {  // the backends' formulations have the segment's run and rise as coefficients
      const std::string segment = where + ": segment " + std::to_string(k - 1) + " (breakpoints " +
                                  std::to_string(k - 1) + " to " + std::to_string(k) + ")";
      Impl::CheckCoefficient(xs[k] - xs[k - 1], segment + " run xs[k+1] - xs[k]");
      if (ys[k] != ys[k - 1]) Impl::CheckCoefficient(ys[k] - ys[k - 1], segment + " rise ys[k+1] - ys[k]");
    }
  }
  const auto [lo, hi] = std::minmax_element(ys.begin(), ys.end());
  const Var y = AddVar(*lo, *hi, VarType::kContinuous, final_name);
  m.pwl.push_back(PiecewiseLinearData{final_name, x.index(), y.index(), std::move(xs), std::move(ys)});
  return y;
}

void Model::SetObjective(const LinExpr& objective, Sense sense) {
  Impl& m = *impl_;
  RowData row;
  row.name = "objective";
  m.MergeTerms(objective, "objective", &row.vars, &row.coefs);
  if (!std::isfinite(objective.constant())) {
    throw InvalidArgument("objective: constant term is " + FormatNumber(objective.constant()) +
                          " (it must be finite)");
  }
  m.objective = std::move(row);
  m.objective_constant = objective.constant();
  m.sense = sense;
}

int Model::num_vars() const { return static_cast<int>(impl_->vars.size()); }
int Model::num_constraints() const { return static_cast<int>(impl_->rows.size()); }

const VarData& Model::var(int index) const {
  if (index < 0 || index >= num_vars()) {
    throw InvalidArgument("variable index " + std::to_string(index) + " is out of range (model " +
                          Quote(impl_->name) + " has " + std::to_string(num_vars()) + " variables)");
  }
  return impl_->vars[static_cast<std::size_t>(index)];
}

const RowData& Model::constraint(int index) const {
  if (index < 0 || index >= num_constraints()) {
    throw InvalidArgument("constraint index " + std::to_string(index) + " is out of range (model " +
                          Quote(impl_->name) + " has " + std::to_string(num_constraints()) + " constraints)");
  }
  return impl_->rows[static_cast<std::size_t>(index)];
}

const std::vector<PiecewiseLinearData>& Model::piecewise_linear() const { return impl_->pwl; }
Sense Model::sense() const { return impl_->sense; }
const RowData& Model::objective() const { return impl_->objective; }
double Model::objective_constant() const { return impl_->objective_constant; }

Var Model::var_handle(int index) const {
  var(index);  // range check
  return Var(impl_->id, index);
}

void Model::CheckOwns(Var var, const std::string& what) const { impl_->CheckOwns(var, what); }

// ----------------------------------------------------------------------------------------------
// Results and options
// ----------------------------------------------------------------------------------------------

const char* ToString(Termination termination) {
  switch (termination) {
    case Termination::kOptimal:
      return "optimal";
    case Termination::kTimeLimit:
      return "time_limit";
    case Termination::kInfeasible:
      return "infeasible";
    case Termination::kUnbounded:
      return "unbounded";
    case Termination::kInfeasibleOrUnbounded:
      return "infeasible_or_unbounded";
    case Termination::kError:
      return "error";
    case Termination::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

bool SolveOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& why) {
    if (error != nullptr) *error = why;
    return false;
  };
  if (std::isnan(time_limit_s) || time_limit_s <= 0.0) {
    return fail("SolveOptions.time_limit_s must be > 0 (+inf for none), got " + FormatNumber(time_limit_s));
  }
  if (!std::isfinite(relative_gap) || relative_gap < 0.0) {
    return fail("SolveOptions.relative_gap must be finite and >= 0, got " + FormatNumber(relative_gap));
  }
  return true;
}

double Result::Value(Var var) const {
  if (!has_solution) {
    throw Error(std::string("Result::Value: the ") + (backend.empty() ? "solver" : backend) +
                " result has no solution (termination: " + ToString(termination) + ")");
  }
  if (model_id != 0 && var.model_id() != model_id) {
    std::ostringstream os;
    os << "Result::Value: variable #" << var.index() << " belongs to model id " << var.model_id()
       << ", not to the solved model (id " << model_id << ")";
    throw InvalidArgument(os.str());
  }
  if (var.index() < 0 || var.index() >= static_cast<int>(values.size())) {
    throw InvalidArgument("Result::Value: variable index " + std::to_string(var.index()) +
                          " is out of range (the solution has " + std::to_string(values.size()) + " values)");
  }
  return values[static_cast<std::size_t>(var.index())];
}

double Result::Value(const LinExpr& expr) const {
  double total = expr.constant();
  for (const auto& [var, coef] : expr.terms()) total += coef * Value(var);
  return total;
}

// ----------------------------------------------------------------------------------------------
// Backend registry
// ----------------------------------------------------------------------------------------------

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};
Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: usable from static destructors
  return *registry;
}
}  // namespace

void RegisterBackend(const std::string& name, BackendFactory factory) {
  if (name.empty()) throw InvalidArgument("RegisterBackend: the backend name is empty");
  if (!factory) throw InvalidArgument("RegisterBackend: backend " + Quote(name) + " has an empty factory");
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.factories[name] = std::move(factory);
}

std::vector<std::string> RegisteredBackends() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& entry : registry.factories) names.push_back(entry.first);
  return names;  // std::map keeps them sorted
}

std::unique_ptr<Backend> MakeBackend(const std::string& name) {
  BackendFactory factory;
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.factories.find(name);
    if (it == registry.factories.end()) {
      std::string known;
      for (const auto& entry : registry.factories) known += (known.empty() ? "" : ", ") + entry.first;
      throw NotAvailable(
          "MILP backend " + Quote(name) +
          " is not available in this build; registered backends: " + (known.empty() ? "none" : known));
    }
    factory = it->second;
  }
  auto backend = factory();
  if (!backend) throw NotAvailable("MILP backend " + Quote(name) + ": its factory returned no backend");
  return backend;
}

Result Solve(const Model& model, const std::string& backend, const SolveOptions& options) {
  return MakeBackend(backend)->Solve(model, options);
}

}  // namespace bft::milp
