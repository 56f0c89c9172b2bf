// pybind11 bindings of bft::curve: ThroughputCurve, model fitting and the ProfilingAdvisor.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bft/curve.h"
#include "bft/profiling.h"
#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

using curve::FitOptions;
using curve::FitResult;
using curve::ModelFit;
using curve::ThroughputCurve;

py::array_t<double> ToNumpy(const std::vector<double>& v) {
  py::array_t<double> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

py::array_t<int> ToNumpy(const std::vector<int>& v) {
  py::array_t<int> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

std::vector<double> ToVector(const py::array_t<double, py::array::c_style | py::array::forcecast>& a,
                             const char* what) {
  if (a.ndim() > 1) throw InvalidArgument(std::string(what) + ": expected a one-dimensional array");
  return std::vector<double>(a.data(), a.data() + a.size());
}

// Applies f elementwise to a numpy array (any shape), or returns a float for a scalar.
template <typename F>
py::object Vectorize(const py::object& x, F f) {
  if (py::isinstance<py::float_>(x) || py::isinstance<py::int_>(x)) return py::float_(f(x.cast<double>()));
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(x);
  if (!a) throw InvalidArgument("expected a number or an array of numbers");
  py::array_t<double> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
  const double* in = a.data();
  double* o = out.mutable_data();
  for (py::ssize_t i = 0; i < a.size(); ++i) o[i] = f(in[i]);
  return std::move(out);
}

}  // namespace

void BindCurve(py::module_& m) {
  BindEnum<curve::Model>(m, "Model", "Throughput models (see docs/curve.md)",
                         {{"AUTO", curve::Model::kAuto},
                          {"AMDAHL", curve::Model::kAmdahl},
                          {"OPTIMUS", curve::Model::kOptimus},
                          {"COMM_LOG", curve::Model::kCommLog},
                          {"USL", curve::Model::kUsl}});
  BindEnum<curve::FitStatus>(m, "FitStatus", "Why a fit did or did not produce parameters",
                             {{"OK", curve::FitStatus::kOk},
                              {"INSUFFICIENT_DATA", curve::FitStatus::kInsufficientData},
                              {"ILL_CONDITIONED", curve::FitStatus::kIllConditioned},
                              {"NOT_CONVERGED", curve::FitStatus::kNotConverged}});
  BindEnum<curve::Selection>(
      m, "Selection", "How the automatic model choice scores models",
      {{"LEAVE_ONE_OUT", curve::Selection::kLeaveOneOut}, {"AICC", curve::Selection::kAicc}});
  m.def("model_from_string", &curve::ModelFromString, py::arg("name"));
  m.def(
      "model_name", [](curve::Model model) { return std::string(curve::ToString(model)); }, py::arg("model"));
  m.def(
      "status_name", [](curve::FitStatus s) { return std::string(curve::ToString(s)); }, py::arg("status"));
  m.def("num_parameters", &curve::NumParameters, py::arg("model"));
  BindEnum<curve::RescaleMethod>(
      m, "RescaleMethod", "How a rescale was done: a relaunch (the default) or in place",
      {{"RELAUNCH", curve::RescaleMethod::kRelaunch}, {"INPLACE", curve::RescaleMethod::kInPlace}});
  m.def("rescale_method_from_string", &curve::RescaleMethodFromString, py::arg("label"));
  BindEnum<curve::Objective>(
      m, "Objective",
      "What the allocator maximises for a job: its throughput, or its speedup over its own "
      "one-node rate",
      {{"THROUGHPUT", curve::Objective::kThroughput}, {"SPEEDUP", curve::Objective::kSpeedup}});
  m.def("objective_from_string", &curve::ObjectiveFromString, py::arg("label"));
  m.def(
      "rescale_method_name", [](curve::RescaleMethod method) { return std::string(curve::ToString(method)); },
      py::arg("method"));
  m.def(
      "measured_rescale_costs",
      [](const curve::JobProfile& profile, double scale_up_s, double scale_down_s,
         curve::RescaleMethod method) {
        curve::MeasuredRescaleCosts(profile, &scale_up_s, &scale_down_s, method);
        return py::make_tuple(scale_up_s, scale_down_s);
      },
      py::arg("profile"), py::arg("scale_up_s"), py::arg("scale_down_s"),
      py::arg("method") = curve::RescaleMethod::kRelaunch,
      "(scale_up_s, scale_down_s) to charge for a rescale by `method`: the profile's measured means of that "
      "method where measured, else the values given");

  py::class_<ThroughputCurve>(m, "ThroughputCurve",
                              "Piecewise-linear curve over node counts; linear from (0, 0) below the first "
                              "breakpoint, flat above the last")
      .def(py::init<>())
      .def(py::init([](const std::vector<int>& nodes, const std::vector<double>& values) {
             return ThroughputCurve(nodes, values);
           }),
           py::arg("nodes"), py::arg("values"))
      .def_static(
          "check",
          [](const std::vector<int>& nodes, const std::vector<double>& values) {
            std::string error;
            const bool ok = ThroughputCurve::Check(nodes, values, &error);
            return py::make_tuple(ok, error);
          },
          py::arg("nodes"), py::arg("values"), "(ok, reason)")
      .def(
          "evaluate",
          [](const ThroughputCurve& c, const py::object& n) {
            return Vectorize(n, [&](double v) { return c.Evaluate(v); });
          },
          py::arg("n"))
      .def(
          "__call__",
          [](const ThroughputCurve& c, const py::object& n) {
            return Vectorize(n, [&](double v) { return c.Evaluate(v); });
          },
          py::arg("n"))
      .def("resample", &ThroughputCurve::Resample, py::arg("at"))
      .def(
          "table", [](const ThroughputCurve& c, int max_nodes) { return ToNumpy(c.Table(max_nodes)); },
          py::arg("max_nodes"), "values at 0, 1, ..., max_nodes (numpy array)")
      .def_property_readonly("nodes", [](const ThroughputCurve& c) { return ToNumpy(c.nodes()); })
      .def_property_readonly("values", [](const ThroughputCurve& c) { return ToNumpy(c.values()); })
      .def("empty", &ThroughputCurve::empty)
      .def("__len__", [](const ThroughputCurve& c) { return c.nodes().size(); })
      .def("__repr__", [](const ThroughputCurve& c) {
        return "ThroughputCurve(" + std::to_string(c.nodes().size()) + " breakpoints)";
      });

  py::class_<FitOptions>(m, "FitOptions")
      .def(py::init<>())
      .def_readwrite("model", &FitOptions::model)
      .def_readwrite("selection", &FitOptions::selection)
      .def_readwrite("max_iterations", &FitOptions::max_iterations)
      .def_readwrite("tolerance", &FitOptions::tolerance)
      .def_readwrite("duplicate_tolerance", &FitOptions::duplicate_tolerance)
      .def_readwrite("extrapolation_discount", &FitOptions::extrapolation_discount)
      .def_readwrite("extrapolation_limit", &FitOptions::extrapolation_limit)
      .def("is_valid", [](const FitOptions& o) {
        std::string error;
        const bool ok = o.IsValid(&error);
        return py::make_tuple(ok, error);
      });

  py::class_<ModelFit>(m, "ModelFit")
      .def_readonly("model", &ModelFit::model)
      .def_readonly("status", &ModelFit::status)
      .def_property_readonly("params",
                             [](const ModelFit& f) {
                               return ToNumpy(std::vector<double>(
                                   f.params.begin(), f.params.begin() + curve::NumParameters(f.model)));
                             })
      .def_readonly("rms_rel_error", &ModelFit::rms_rel_error)
      .def_readonly("loo_rel_error", &ModelFit::loo_rel_error)
      .def_readonly("aicc", &ModelFit::aicc)
      .def_readonly("iterations", &ModelFit::iterations)
      .def(
          "predict",
          [](const ModelFit& f, const py::object& n) {
            return Vectorize(n, [&](double v) { return f.Predict(v); });
          },
          py::arg("n"));

  py::class_<FitResult>(m, "FitResult")
      .def_readonly("status", &FitResult::status)
      .def_readonly("message", &FitResult::message)
      .def_readonly("best", &FitResult::best)
      .def_readonly("candidates", &FitResult::candidates)
      .def_readonly("num_sizes", &FitResult::num_sizes)
      .def_readonly("min_nodes", &FitResult::min_nodes)
      .def_readonly("max_nodes", &FitResult::max_nodes)
      .def_readonly("options", &FitResult::options)
      .def_property_readonly("ok", &FitResult::ok)
      .def_property_readonly("model", &FitResult::model)
      .def(
          "predict",
          [](const FitResult& f, const py::object& n) {
            return Vectorize(n, [&](double v) { return f.Predict(v); });
          },
          py::arg("n"), "raw model prediction (samples/s); raises if the fit is not ok")
      .def(
          "evaluate",
          [](const FitResult& f, const py::object& n) {
            return Vectorize(n, [&](double v) { return f.Evaluate(v); });
          },
          py::arg("n"), "prediction with the conservative extrapolation rule")
      .def("to_curve", &FitResult::ToCurve, py::arg("max_nodes"));

  m.def(
      "fit",
      [](const py::array_t<double, py::array::c_style | py::array::forcecast>& nodes,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& samples_per_s,
         const py::object& weights, const FitOptions& options) {
        std::vector<double> n = ToVector(nodes, "nodes");
        std::vector<double> x = ToVector(samples_per_s, "samples_per_s");
        std::vector<double> w;
        if (!weights.is_none())
          w = ToVector(py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(weights),
                       "weights");
        py::gil_scoped_release release;
        return curve::Fit(n, x, w, options);
      },
      py::arg("nodes"), py::arg("samples_per_s"), py::arg("weights") = py::none(),
      py::arg("options") = FitOptions());

  using curve::AdvisorOptions;
  py::class_<AdvisorOptions>(m, "AdvisorOptions")
      .def(py::init<>())
      .def_readwrite("warmup_s", &AdvisorOptions::warmup_s)
      .def_readwrite("warmup_intervals", &AdvisorOptions::warmup_intervals)
      .def_readwrite("half_life_s", &AdvisorOptions::half_life_s)
      .def_readwrite("drift_threshold", &AdvisorOptions::drift_threshold)
      .def_readwrite("drift_intervals", &AdvisorOptions::drift_intervals)
      .def_readwrite("drift_discount", &AdvisorOptions::drift_discount)
      .def_readwrite("max_intervals_per_size", &AdvisorOptions::max_intervals_per_size)
      .def_readwrite("prior_samples_per_node_s", &AdvisorOptions::prior_samples_per_node_s)
      .def_readwrite("single_interval_rel_sd", &AdvisorOptions::single_interval_rel_sd)
      .def_readwrite("rel_sd_per_doubling", &AdvisorOptions::rel_sd_per_doubling)
      .def_readwrite("exploration_bonus", &AdvisorOptions::exploration_bonus)
      .def_readwrite("fit", &AdvisorOptions::fit)
      .def("is_valid", [](const AdvisorOptions& o) {
        std::string error;
        const bool ok = o.IsValid(&error);
        return py::make_tuple(ok, error);
      });

  py::class_<curve::SizeEstimate>(m, "SizeEstimate")
      .def_readonly("nodes", &curve::SizeEstimate::nodes)
      .def_readonly("samples_per_s", &curve::SizeEstimate::samples_per_s)
      .def_readonly("rel_sd", &curve::SizeEstimate::rel_sd)
      .def_readonly("weight", &curve::SizeEstimate::weight)
      .def_readonly("steady_s", &curve::SizeEstimate::steady_s)
      .def_readonly("intervals", &curve::SizeEstimate::intervals);
  py::class_<curve::RescaleOverhead>(m, "RescaleOverhead")
      .def_readonly("time_s", &curve::RescaleOverhead::time_s)
      .def_readonly("from_nodes", &curve::RescaleOverhead::from_nodes)
      .def_readonly("to_nodes", &curve::RescaleOverhead::to_nodes)
      .def_readonly("overhead_s", &curve::RescaleOverhead::overhead_s)
      .def_readonly("lost_samples", &curve::RescaleOverhead::lost_samples)
      .def_readonly("method", &curve::RescaleOverhead::method);
  py::class_<curve::RescaleCosts>(m, "RescaleCosts")
      .def_readonly("method", &curve::RescaleCosts::method)
      .def_readonly("mean_scale_up_s", &curve::RescaleCosts::mean_scale_up_s)
      .def_readonly("mean_scale_down_s", &curve::RescaleCosts::mean_scale_down_s)
      .def_readonly("scale_ups", &curve::RescaleCosts::scale_ups)
      .def_readonly("scale_downs", &curve::RescaleCosts::scale_downs);
  py::class_<curve::ProbeSuggestion>(m, "ProbeSuggestion")
      .def_readonly("nodes", &curve::ProbeSuggestion::nodes)
      .def_readonly("predicted_samples_per_s", &curve::ProbeSuggestion::predicted_samples_per_s)
      .def_readonly("rel_sd", &curve::ProbeSuggestion::rel_sd)
      .def_readonly("score", &curve::ProbeSuggestion::score);
  py::class_<curve::JobProfile>(m, "JobProfile")
      .def_readonly("job_id", &curve::JobProfile::job_id)
      .def_readonly("current_nodes", &curve::JobProfile::current_nodes)
      .def_readonly("last_report_s", &curve::JobProfile::last_report_s)
      .def_readonly("cumulative_samples", &curve::JobProfile::cumulative_samples)
      .def_readonly("sizes", &curve::JobProfile::sizes)
      .def_readonly("rescales", &curve::JobProfile::rescales)
      .def_readonly("costs", &curve::JobProfile::costs)
      .def("method_costs", &curve::JobProfile::MethodCosts, py::arg("method"), py::return_value_policy::copy)
      .def_readonly("fit", &curve::JobProfile::fit)
      .def_readonly("has_prior", &curve::JobProfile::has_prior)
      .def_readonly("prior_samples_per_node_s", &curve::JobProfile::prior_samples_per_node_s)
      .def_readonly("model", &curve::JobProfile::model);

  py::class_<curve::AdvisorCurves>(m, "AdvisorCurves")
      .def_readonly("throughput", &curve::AdvisorCurves::throughput)
      .def_readonly("objective", &curve::AdvisorCurves::objective);

  using curve::ProfilingAdvisor;
  py::class_<ProfilingAdvisor>(m, "ProfilingAdvisor")
      .def(py::init<AdvisorOptions>(), py::arg("options") = AdvisorOptions())
      .def_property_readonly("options", &ProfilingAdvisor::options)
      .def(
          "report", &ProfilingAdvisor::Report, py::arg("job_id"), py::arg("time_s"), py::arg("nodes"),
          py::arg("cumulative_samples"), py::arg("method") = py::none(),
          "a progress report; `method` (a RescaleMethod): how the rescale it starts is done (None: relaunch)")
      .def("set_prior", &ProfilingAdvisor::SetPrior, py::arg("job_id"), py::arg("samples_per_node_s"))
      .def("set_model", &ProfilingAdvisor::SetModel, py::arg("job_id"), py::arg("model"))
      .def("throughput_estimate", &ProfilingAdvisor::ThroughputEstimate, py::arg("job_id"),
           py::arg("max_nodes"))
      .def("objective_curve", &ProfilingAdvisor::ObjectiveCurve, py::arg("job_id"), py::arg("max_nodes"),
           py::arg("objective") = curve::Objective::kThroughput)
      .def("curves", &ProfilingAdvisor::Curves, py::arg("job_id"), py::arg("max_nodes"),
           py::arg("objective") = curve::Objective::kThroughput,
           "both curves at once: .throughput and .objective (in `objective`'s units, an Objective)")
      .def("relative_uncertainty", &ProfilingAdvisor::RelativeUncertainty, py::arg("job_id"), py::arg("n"))
      .def("probe_suggestions", &ProfilingAdvisor::ProbeSuggestions, py::arg("job_id"), py::arg("max_nodes"),
           py::arg("max_suggestions") = 3)
      .def("profile", &ProfilingAdvisor::Profile, py::arg("job_id"))
      .def("has_job", &ProfilingAdvisor::HasJob, py::arg("job_id"))
      .def("jobs", &ProfilingAdvisor::Jobs)
      .def("forget", &ProfilingAdvisor::Forget, py::arg("job_id"))
      .def("save", &ProfilingAdvisor::Save)
      .def_static("load", &ProfilingAdvisor::Load, py::arg("state"));
}

}  // namespace bft::python
