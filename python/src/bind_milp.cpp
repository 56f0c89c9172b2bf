// pybind11 bindings of bft::milp (submodule bft._core.milp): the model, natural expressions
// (`2*x + 3*y <= 10`), backends and results. Solves release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <map>
#include <sstream>

#include "bft/milp.h"
#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

using milp::Backend;
using milp::LinConstraint;
using milp::LinExpr;
using milp::Model;
using milp::Result;
using milp::Sense;
using milp::SolveOptions;
using milp::Termination;
using milp::Var;
using milp::VarType;

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string ExprRepr(const LinExpr& e) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [var, coef] : e.terms()) {
    os << (first ? (coef < 0 ? "-" : "") : (coef < 0 ? " - " : " + "));
    const double a = std::abs(coef);
    if (a != 1.0) os << a << "*";
    os << "v" << var.index();
    first = false;
  }
  if (e.constant() != 0.0 || first)
    os << (first ? "" : (e.constant() < 0 ? " - " : " + "))
       << (first ? e.constant() : std::abs(e.constant()));
  return os.str();
}

// Truth value of a constraint, so that Vars work as dict keys and in `==` comparisons of handles:
// true if it holds identically (same variable on both sides), false for `x == y` of two different
// variables; anything else (`0 <= x <= 5`, `if x <= 3:`) is an error, not a silent False.
bool ConstraintTruth(const LinConstraint& c) {
  std::map<std::pair<std::uint64_t, int>, double> merged;
  for (const auto& [var, coef] : c.expr.terms()) merged[{var.model_id(), var.index()}] += coef;
  std::vector<double> nonzero;
  for (const auto& entry : merged)
    if (entry.second != 0.0) nonzero.push_back(entry.second);
  const double k = c.expr.constant();
  if (nonzero.empty() && c.lower <= -k && -k <= c.upper) return true;
  if (c.lower == 0.0 && c.upper == 0.0 && k == 0.0 && nonzero.size() == 2 &&
      ((nonzero[0] == 1.0 && nonzero[1] == -1.0) || (nonzero[0] == -1.0 && nonzero[1] == 1.0))) {
    return false;
  }
  throw py::type_error(
      "a constraint has no truth value; chained comparisons such as `0 <= x <= 5` are not supported: "
      "use model.add_constraint(expr, lower, upper)");
}

// The solution values as a read-only numpy view on the Result (no copy); the Result stays alive.
py::array_t<double> ValuesView(const py::object& self) {
  const Result& r = self.cast<const Result&>();
  py::array_t<double> a({static_cast<py::ssize_t>(r.values.size())},
                        {static_cast<py::ssize_t>(sizeof(double))}, r.values.data(), self);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

std::vector<double> ToVector(const py::array_t<double, py::array::c_style | py::array::forcecast>& a,
                             const char* what) {
  if (a.ndim() != 1)
    throw InvalidArgument(std::string(what) + ": expected a one-dimensional sequence of numbers");
  return std::vector<double>(a.data(), a.data() + a.size());
}

// Solves a snapshot of `model` with the GIL released. The copy is taken while this thread holds
// the GIL, so no Python thread can change the model while it is copied, and a change made while the
// solve runs (another thread may take the GIL then) touches the original, never what the backend
// reads. The result names the original model: the snapshot has the same variable indices.
// Ctrl-C stops the solve (SigintScope) and raises KeyboardInterrupt once it has returned.
Result SolveSnapshot(const Backend& backend, const Model& model, const SolveOptions& options) {
  const Model snapshot(model);
  SolveOptions interruptible = options;
  const SigintScope sigint;
  if (!interruptible.interrupt) interruptible.interrupt = SigintScope::Poll();
  Result result;
  {
    py::gil_scoped_release release;
    result = backend.Solve(snapshot, interruptible);
  }
  ThrowIfSignalled();
  result.model_id = model.id();
  return result;
}

}  // namespace

void BindMilp(py::module_& m) {
  m.attr("INF") = milp::kInf;
  BindEnum<VarType>(
      m, "VarType", "Kind of a variable",
      {{"CONTINUOUS", VarType::kContinuous}, {"INTEGER", VarType::kInteger}, {"BINARY", VarType::kBinary}});
  BindEnum<Sense>(m, "Sense", "Direction of optimisation",
                  {{"MAXIMIZE", Sense::kMaximize}, {"MINIMIZE", Sense::kMinimize}});
  BindEnum<Termination>(m, "Termination", "Why the solver stopped (separate from Result.has_solution)",
                        {{"OPTIMAL", Termination::kOptimal},
                         {"TIME_LIMIT", Termination::kTimeLimit},
                         {"INFEASIBLE", Termination::kInfeasible},
                         {"UNBOUNDED", Termination::kUnbounded},
                         {"INFEASIBLE_OR_UNBOUNDED", Termination::kInfeasibleOrUnbounded},
                         {"ERROR", Termination::kError},
                         {"INTERRUPTED", Termination::kInterrupted}});
  m.def(
      "termination_name", [](Termination t) { return std::string(milp::ToString(t)); },
      "Short name of a termination: 'optimal', 'time_limit', 'infeasible', 'unbounded', "
      "'infeasible_or_unbounded', 'error', 'interrupted'");

  py::class_<LinExpr> expr(m, "LinExpr", "A linear expression sum(coef * var) + constant");
  py::class_<Var> var(m, "Var",
                      "A variable of one model; combine with + - * and compare to make constraints");
  py::class_<LinConstraint> constraint(m, "LinConstraint",
                                       "lower <= expr <= upper, made by comparing expressions");

  var.def_property_readonly("index", &Var::index)
      .def_property_readonly("model_id", &Var::model_id)
      .def(
          "same_as", [](const Var& a, const Var& b) { return a == b; },
          "Whether both handles name the same variable")
      .def("__hash__", [](const Var& v) { return py::hash(py::make_tuple(v.model_id(), v.index())); })
      .def("__repr__", [](const Var& v) { return "<bft.milp.Var #" + std::to_string(v.index()) + ">"; })
      .def("__pos__", [](const Var& v) { return LinExpr(v); })
      .def("__neg__", [](const Var& v) { return -LinExpr(v); });

  expr.def(py::init<>())
      .def(py::init<double>(), py::arg("constant"))
      .def(py::init<Var>(), py::arg("var"))
      .def("add_term", &LinExpr::AddTerm, py::arg("var"), py::arg("coef"),
           "Adds coef * var in place; returns self", py::return_value_policy::reference_internal)
      .def_property_readonly("terms", &LinExpr::terms, "List of (Var, coefficient), unmerged")
      .def_property_readonly("constant", &LinExpr::constant)
      .def_property_readonly("model_id", &LinExpr::model_id)
      .def("copy", [](const LinExpr& e) { return e; })
      .def("__repr__", [](const LinExpr& e) { return "<bft.milp.LinExpr " + ExprRepr(e) + ">"; })
      .def("__pos__", [](const LinExpr& e) { return e; })
      .def("__neg__", [](const LinExpr& e) { return -e; });
  py::implicitly_convertible<Var, LinExpr>();
  py::implicitly_convertible<py::float_, LinExpr>();
  py::implicitly_convertible<py::int_, LinExpr>();

  // Arithmetic and comparisons, on Var and LinExpr alike (the other operand: number, Var or LinExpr).
  auto arithmetic = [](auto& cls) {
    using T = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def(
           "__add__", [](const T& a, const LinExpr& b) { return LinExpr(a) + b; }, py::is_operator())
        .def(
            "__radd__", [](const T& a, const LinExpr& b) { return b + LinExpr(a); }, py::is_operator())
        .def(
            "__sub__", [](const T& a, const LinExpr& b) { return LinExpr(a) - b; }, py::is_operator())
        .def(
            "__rsub__", [](const T& a, const LinExpr& b) { return b - LinExpr(a); }, py::is_operator())
        .def(
            "__mul__", [](const T& a, double f) { return LinExpr(a) * f; }, py::is_operator())
        .def(
            "__rmul__", [](const T& a, double f) { return f * LinExpr(a); }, py::is_operator())
        .def(
            "__truediv__", [](const T& a, double f) { return LinExpr(a) * (1.0 / f); }, py::is_operator())
        .def(
            "__le__", [](const T& a, const LinExpr& b) { return LinExpr(a) <= b; }, py::is_operator())
        .def(
            "__ge__", [](const T& a, const LinExpr& b) { return LinExpr(a) >= b; }, py::is_operator())
        .def(
            "__eq__", [](const T& a, const LinExpr& b) { return LinExpr(a) == b; }, py::is_operator());
  };
  arithmetic(var);
  arithmetic(expr);
  expr.def(
          "__iadd__", [](LinExpr& a, const LinExpr& b) -> LinExpr& { return a += b; }, py::is_operator())
      .def(
          "__isub__", [](LinExpr& a, const LinExpr& b) -> LinExpr& { return a -= b; }, py::is_operator())
      .def(
          "__imul__", [](LinExpr& a, double f) -> LinExpr& { return a *= f; }, py::is_operator());

  constraint
      .def(py::init([](const LinExpr& e, double lower, double upper) {
             return LinConstraint{e, lower, upper};
           }),
           py::arg("expr"), py::arg("lower") = -milp::kInf, py::arg("upper") = milp::kInf)
      .def_readonly("expr", &LinConstraint::expr)
      .def_readonly("lower", &LinConstraint::lower)
      .def_readonly("upper", &LinConstraint::upper)
      .def("__bool__", &ConstraintTruth)
      .def("__repr__", [](const LinConstraint& c) {
        return "<bft.milp.LinConstraint " + Num(c.lower) + " <= " + ExprRepr(c.expr) + " <= " + Num(c.upper) +
               ">";
      });

  py::class_<milp::ConstraintRef>(m, "ConstraintRef", "A handle to a constraint of one model")
      .def_readonly("model_id", &milp::ConstraintRef::model_id)
      .def_readonly("index", &milp::ConstraintRef::index);
  py::class_<milp::VarData>(m, "VarData", "A variable as stored in the model")
      .def_readonly("name", &milp::VarData::name)
      .def_readonly("type", &milp::VarData::type)
      .def_readonly("lower", &milp::VarData::lower)
      .def_readonly("upper", &milp::VarData::upper);
  py::class_<milp::RowData>(m, "RowData",
                            "A linear row as stored: merged terms, constant moved into the bounds")
      .def_readonly("name", &milp::RowData::name)
      .def_readonly("vars", &milp::RowData::vars)
      .def_readonly("coefs", &milp::RowData::coefs)
      .def_readonly("lower", &milp::RowData::lower)
      .def_readonly("upper", &milp::RowData::upper);
  py::class_<milp::PiecewiseLinearData>(m, "PiecewiseLinearData",
                                        "y = f(x) through breakpoints (SOS2 semantics)")
      .def_readonly("name", &milp::PiecewiseLinearData::name)
      .def_readonly("x", &milp::PiecewiseLinearData::x)
      .def_readonly("y", &milp::PiecewiseLinearData::y)
      .def_readonly("xs", &milp::PiecewiseLinearData::xs)
      .def_readonly("ys", &milp::PiecewiseLinearData::ys);

  py::class_<Model>(m, "Model",
                    "A solver-agnostic MILP model; invalid input raises ValueError naming the culprit")
      .def(py::init<std::string>(), py::arg("name") = "bft")
      .def_property_readonly("name", &Model::name)
      .def_property_readonly("id", &Model::id)
      .def("add_var", &Model::AddVar, py::arg("lower") = 0.0, py::arg("upper") = milp::kInf,
           py::arg("type") = VarType::kContinuous, py::arg("name") = "")
      .def("add_continuous", &Model::AddContinuous, py::arg("lower") = 0.0, py::arg("upper") = milp::kInf,
           py::arg("name") = "")
      .def("add_integer", &Model::AddInteger, py::arg("lower") = 0.0, py::arg("upper") = milp::kInf,
           py::arg("name") = "")
      .def("add_binary", &Model::AddBinary, py::arg("name") = "")
      .def("add_constraint", py::overload_cast<const LinConstraint&, std::string>(&Model::AddConstraint),
           py::arg("constraint"), py::arg("name") = "", "Adds `expr <= rhs`, `expr >= rhs` or `expr == rhs`")
      .def("add_constraint",
           py::overload_cast<const LinExpr&, double, double, std::string>(&Model::AddConstraint),
           py::arg("expr"), py::arg("lower"), py::arg("upper"), py::arg("name") = "",
           "Adds lower <= expr <= upper")
      .def(
          "add_piecewise_linear",
          [](Model& self, Var x, const py::array_t<double, py::array::c_style | py::array::forcecast>& xs,
             const py::array_t<double, py::array::c_style | py::array::forcecast>& ys, std::string name) {
            return self.AddPiecewiseLinear(x, ToVector(xs, "add_piecewise_linear xs"),
                                           ToVector(ys, "add_piecewise_linear ys"), std::move(name));
          },
          py::arg("x"), py::arg("xs"), py::arg("ys"), py::arg("name") = "",
          "Returns y = f(x), f piecewise linear through (xs[k], ys[k]); exact (SOS2) for any f")
      .def("set_objective", &Model::SetObjective, py::arg("objective"), py::arg("sense"))
      .def("maximize", &Model::Maximize, py::arg("objective"))
      .def("minimize", &Model::Minimize, py::arg("objective"))
      .def_property_readonly("num_vars", &Model::num_vars)
      .def_property_readonly("num_constraints", &Model::num_constraints)
      .def("var", &Model::var, py::arg("index"), py::return_value_policy::copy)
      .def("constraint", &Model::constraint, py::arg("index"), py::return_value_policy::copy)
      .def_property_readonly("piecewise_linear", &Model::piecewise_linear, py::return_value_policy::copy)
      .def_property_readonly("sense", &Model::sense)
      .def_property_readonly("objective", &Model::objective, py::return_value_policy::copy)
      .def_property_readonly("objective_constant", &Model::objective_constant)
      .def("var_handle", &Model::var_handle, py::arg("index"))
      .def("check_owns", &Model::CheckOwns, py::arg("var"), py::arg("what"))
      .def("to_lp_string", &Model::ToLpString, "The model as CPLEX-LP text")
      .def("write_lp", &Model::WriteLp, py::arg("path"))
      .def(
          "copy", [](const Model& self) { return Model(self); },
          "A new model (handles of this one do not refer to it)")
      .def("__copy__", [](const Model& self) { return Model(self); })
      .def(
          "__deepcopy__", [](const Model& self, py::dict) { return Model(self); }, py::arg("memo"))
      .def("__repr__", [](const Model& self) {
        return "<bft.milp.Model '" + self.name() + "': " + std::to_string(self.num_vars()) + " variables, " +
               std::to_string(self.num_constraints()) + " constraints, " +
               std::to_string(self.piecewise_linear().size()) + " piecewise-linear>";
      });

  py::class_<SolveOptions>(m, "SolveOptions", "Options of a solve")
      .def(py::init([](double time_limit_s, double relative_gap, bool presolve, bool verbose, bool isolate) {
             SolveOptions o;
             o.time_limit_s = time_limit_s;
             o.relative_gap = relative_gap;
             o.presolve = presolve;
             o.verbose = verbose;
             o.isolate = isolate;
             return o;
           }),
           py::arg("time_limit_s") = milp::kInf, py::arg("relative_gap") = SolveOptions{}.relative_gap,
           py::arg("presolve") = true, py::arg("verbose") = false, py::arg("isolate") = false)
      .def_readwrite("time_limit_s", &SolveOptions::time_limit_s)
      .def_readwrite("relative_gap", &SolveOptions::relative_gap)
      .def_readwrite("presolve", &SolveOptions::presolve)
      .def_readwrite("verbose", &SolveOptions::verbose)
      .def_readwrite("isolate", &SolveOptions::isolate,
                     "Solve in a child process: a backend crash becomes an ERROR result")
      .def("is_valid", [](const SolveOptions& o) { return o.IsValid(nullptr); })
      .def(
          "validation_error",
          [](const SolveOptions& o) {
            std::string error;
            o.IsValid(&error);
            return error;
          },
          "Why the options are invalid; empty when valid");

  py::class_<Result>(m, "Result", "Outcome of a solve: why it stopped, and the solution if there is one")
      .def(py::init<>())
      .def_readonly("termination", &Result::termination)
      .def_readonly("message", &Result::message)
      .def_readonly("backend", &Result::backend)
      .def_readonly("has_solution", &Result::has_solution)
      .def_readonly("objective", &Result::objective)
      .def_readonly("best_bound", &Result::best_bound)
      .def_readonly("gap", &Result::gap)
      .def_readonly("wall_time_s", &Result::wall_time_s)
      .def_readonly("model_id", &Result::model_id)
      .def_property_readonly("values", &ValuesView,
                             "Solution values, one per model variable (read-only numpy view)")
      .def_property_readonly("optimal", &Result::optimal)
      .def(
          "value", [](const Result& r, const Var& v) { return r.Value(v); }, py::arg("var"))
      .def(
          "value", [](const Result& r, const LinExpr& e) { return r.Value(e); }, py::arg("expr"),
          "Value of a variable or expression in the solution; raises bft.Error without a solution")
      .def("__getitem__", [](const Result& r, const Var& v) { return r.Value(v); })
      .def("__repr__", [](const Result& r) {
        std::ostringstream os;
        os << "<bft.milp.Result " << milp::ToString(r.termination) << " backend=" << r.backend;
        if (r.has_solution)
          os << " objective=" << r.objective << " bound=" << r.best_bound << " gap=" << r.gap;
        os << " wall_time_s=" << r.wall_time_s << ">";
        return os.str();
      });

  py::class_<Backend>(m, "Backend", "A MILP solver backend")
      .def_property_readonly("name", &Backend::name)
      .def("solve", &SolveSnapshot, py::arg("model"), py::arg("options") = SolveOptions{},
           "Solves a snapshot of the model (the GIL is released; changing the model meanwhile does not "
           "affect the solve); never raises for solver failures");

  m.def("registered_backends", &milp::RegisteredBackends, "Names of the backends this build has, sorted");
  // The C++ defaults, read by bft.milp and the command lines' help: one home for each.
  m.attr("DEFAULT_BACKEND") = milp::kDefaultBackend;
  m.attr("DEFAULT_RELATIVE_GAP") = SolveOptions{}.relative_gap;
  m.def("make_backend", &milp::MakeBackend, py::arg("name"),
        "Raises bft.NotAvailable for an unknown backend");
  m.def(
      "solve",
      [](const Model& model, const std::string& backend, const SolveOptions& options) {
        auto b = milp::MakeBackend(backend);  // may raise NotAvailable: keep the GIL for that
        return SolveSnapshot(*b, model, options);
      },
      py::arg("model"), py::arg("backend") = milp::kDefaultBackend, py::arg("options") = SolveOptions{},
      "Solves a snapshot of `model` with the named backend; the GIL is released while solving, and "
      "changing the model from another thread meanwhile does not affect the solve");
}

}  // namespace bft::python
