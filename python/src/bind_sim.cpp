// bft._core.sim: trace and workload readers, the replay engine and the synthetic generator.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bft/alloc.h"
#include "bft/sim.h"
#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

template <typename T, typename Row, typename Get>
py::array_t<T> Column(const std::vector<Row>& rows, Get get) {
  py::array_t<T> out(static_cast<py::ssize_t>(rows.size()));
  T* p = out.mutable_data();
  for (std::size_t i = 0; i < rows.size(); ++i) p[i] = static_cast<T>(get(rows[i]));
  return out;
}

py::dict SummaryToDict(const sim::Summary& s) {
  py::dict d;
  d["policy"] = s.policy;
  d["curves"] = s.curves;
  d["accounting"] = s.accounting;
  d["configurations"] = s.configurations;
  d["start_s"] = s.start_s;
  d["end_s"] = s.end_s;
  d["nodes"] = s.nodes;
  d["events"] = s.events;
  d["samples_done"] = s.samples_done;
  d["samples_without_losses"] = s.samples_without_losses;
  d["loss_samples"] = s.loss_samples;
  d["unpaid_loss_samples"] = s.unpaid_loss_samples;
  d["idle_node_hours"] = s.idle_node_hours;
  d["used_node_hours"] = s.used_node_hours;
  d["idle_capture"] = s.idle_capture;
  d["active_start_s"] = s.active_start_s;
  d["active_end_s"] = s.active_end_s;
  d["active_idle_node_hours"] = s.active_idle_node_hours;
  d["active_used_node_hours"] = s.active_used_node_hours;
  d["active_idle_capture"] = s.active_idle_capture;
  d["overhead_efficiency"] = s.overhead_efficiency;
  d["jobs_submitted"] = s.jobs_submitted;
  d["jobs_admitted"] = s.jobs_admitted;
  d["jobs_finished"] = s.jobs_finished;
  d["makespan_s"] = s.makespan_s;
  d["mean_turnaround_s"] = s.mean_turnaround_s;
  d["rescales"] = s.rescales;
  d["preemptions"] = s.preemptions;
  d["configuration_switches"] = s.configuration_switches;
  d["partial_node_hours"] = s.partial_node_hours;
  d["allocator_calls"] = s.allocator_calls;
  d["allocator_p50_s"] = s.allocator_p50_s;
  d["allocator_p99_s"] = s.allocator_p99_s;
  d["allocator_max_s"] = s.allocator_max_s;
  d["allocator_time_limits"] = s.allocator_time_limits;
  d["allocator_failures"] = s.allocator_failures;
  d["allocator_total_s"] = s.allocator_total_s;
  d["wall_s"] = s.wall_s;
  return d;
}

py::dict ResultToDict(const sim::ReplayResult& r) {
  py::dict out;
  out["summary"] = SummaryToDict(r.summary);
  using S = sim::Step;
  const auto& st = r.steps;
  py::dict steps;
  steps["time_s"] = Column<double>(st, [](const S& s) { return s.time_s; });
  steps["transitions"] = Column<std::int32_t>(st, [](const S& s) { return s.transitions; });
  steps["idle_nodes"] = Column<std::int32_t>(st, [](const S& s) { return s.idle_nodes; });
  steps["used_nodes"] = Column<std::int32_t>(st, [](const S& s) { return s.used_nodes; });
  steps["running_jobs"] = Column<std::int32_t>(st, [](const S& s) { return s.running_jobs; });
  steps["active_jobs"] = Column<std::int32_t>(st, [](const S& s) { return s.active_jobs; });
  steps["queued_jobs"] = Column<std::int32_t>(st, [](const S& s) { return s.queued_jobs; });
  steps["finished_jobs"] = Column<std::int32_t>(st, [](const S& s) { return s.finished_jobs; });
  steps["rescales"] = Column<std::int32_t>(st, [](const S& s) { return s.rescales; });
  steps["preemptions"] = Column<std::int32_t>(st, [](const S& s) { return s.preemptions; });
  steps["samples_done"] = Column<double>(st, [](const S& s) { return s.samples_done; });
  steps["rate"] = Column<double>(st, [](const S& s) { return s.rate; });
  steps["allocator_s"] = Column<double>(st, [](const S& s) { return s.allocator_s; });
  out["steps"] = steps;

  using J = sim::JobResult;
  const auto& js = r.jobs;
  py::dict jobs;
  py::list names;
  for (const J& j : js) names.append(j.name);
  jobs["name"] = names;
  jobs["submit_s"] = Column<double>(js, [](const J& j) { return j.submit_s; });
  jobs["admit_s"] = Column<double>(js, [](const J& j) { return j.admit_s; });
  jobs["finish_s"] = Column<double>(js, [](const J& j) { return j.finish_s; });
  jobs["work"] = Column<double>(js, [](const J& j) { return j.work; });
  jobs["done"] = Column<double>(js, [](const J& j) { return j.done; });
  jobs["loss_samples"] = Column<double>(js, [](const J& j) { return j.loss_samples; });
  jobs["unpaid_loss_samples"] = Column<double>(js, [](const J& j) { return j.unpaid_loss_samples; });
  jobs["rescales"] = Column<std::int32_t>(js, [](const J& j) { return j.rescales; });
  jobs["preemptions"] = Column<std::int32_t>(js, [](const J& j) { return j.preemptions; });
  jobs["node_seconds"] = Column<double>(js, [](const J& j) { return j.node_seconds; });
  jobs["configuration_switches"] =
      Column<std::int32_t>(js, [](const J& j) { return j.configuration_switches; });
  jobs["partial_node_seconds"] = Column<double>(js, [](const J& j) { return j.partial_node_seconds; });
  jobs["allocator_scale_up_s"] = Column<double>(js, [](const J& j) { return j.allocator_scale_up_s; });
  jobs["allocator_scale_down_s"] = Column<double>(js, [](const J& j) { return j.allocator_scale_down_s; });
  out["jobs"] = jobs;

  using P = sim::JobProgress;
  py::dict progress;
  progress["time_s"] = Column<double>(r.progress, [](const P& p) { return p.time_s; });
  progress["job"] = Column<std::int32_t>(r.progress, [](const P& p) { return p.job; });
  progress["done"] = Column<double>(r.progress, [](const P& p) { return p.done; });
  progress["nodes"] = Column<std::int32_t>(r.progress, [](const P& p) { return p.nodes; });
  progress["rate"] = Column<double>(r.progress, [](const P& p) { return p.rate; });
  progress["estimate"] = Column<double>(r.progress, [](const P& p) { return p.estimate; });
  out["progress"] = progress;

  using A = sim::AssignmentChange;
  py::dict assignments;
  assignments["time_s"] = Column<double>(r.assignments, [](const A& a) { return a.time_s; });
  assignments["node"] = Column<std::int64_t>(r.assignments, [](const A& a) { return a.node; });
  assignments["job"] = Column<std::int32_t>(r.assignments, [](const A& a) { return a.job; });
  out["assignments"] = assignments;
  return out;
}

}  // namespace

// A 1-D array of whole numbers as int64, refusing what a cast would change: fractions (1.9 is
// not 1), NaN, values out of range, booleans, strings and objects.
std::vector<std::int64_t> WholeNumbers(const py::object& values, const std::string& what) {
  const py::array a = py::array::ensure(values);
  if (!a) {
    PyErr_Clear();
    throw InvalidArgument(what + ": expected a 1-D array of whole numbers");
  }
  if (a.ndim() != 1) throw InvalidArgument(what + ": expected a 1-D array of whole numbers");
  const char kind = a.dtype().kind();
  std::vector<std::int64_t> out(static_cast<std::size_t>(a.size()));
  if (kind == 'i' || kind == 'u') {
    const auto cast = py::array_t<std::int64_t, py::array::forcecast>::ensure(a);
    if (!cast) throw InvalidArgument(what + ": values out of the int64 range");
    if (kind == 'u') {
      const auto big = py::array_t<std::uint64_t, py::array::forcecast>::ensure(a);
      for (py::ssize_t i = 0; i < a.size(); ++i) {
        if (big.at(i) > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          throw InvalidArgument(what + "[" + std::to_string(i) + "]: out of the int64 range");
      }
    }
    for (py::ssize_t i = 0; i < a.size(); ++i) out[static_cast<std::size_t>(i)] = cast.at(i);
    return out;
  }
  if (kind == 'f') {
    const auto values = py::array_t<double, py::array::forcecast>::ensure(a);
    for (py::ssize_t i = 0; i < a.size(); ++i) {
      const double v = values.at(i);
      if (!(v == std::floor(v)) || std::fabs(v) >= 9.2e18) {
        std::ostringstream os;
        os << what << "[" << i << "]: expected a whole number, got " << v;
        throw InvalidArgument(os.str());
      }
      out[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(v);
    }
    return out;
  }
  throw InvalidArgument(what + ": expected whole numbers, got an array of dtype " +
                        py::str(a.dtype()).cast<std::string>());
}

void BindSim(py::module_& m) {
  BindEnum<sim::NodeState>(m, "NodeState", "A node's state in an idle-node trace",
                           {{"BUSY", sim::NodeState::kBusy}, {"IDLE", sim::NodeState::kIdle}});
  BindEnum<sim::CurveMode>(m, "CurveMode", "Where the allocator's curves come from",
                           {{"ORACLE", sim::CurveMode::kOracle},
                            {"LEARNED", sim::CurveMode::kLearned},
                            {"LEARNED_CURVES", sim::CurveMode::kLearnedCurves},
                            {"LEARNED_COSTS", sim::CurveMode::kLearnedCosts}});

  py::class_<sim::Trace>(m, "Trace", "An idle-node trace: node names and time-sorted transitions.")
      .def(py::init([](std::vector<std::string> node_names, const py::object& times, const py::object& nodes,
                       const py::object& states) {
             const std::vector<std::int64_t> tv = WholeNumbers(times, "Trace: times");
             const std::vector<std::int64_t> nv = WholeNumbers(nodes, "Trace: nodes");
             const std::vector<std::int64_t> sv = WholeNumbers(states, "Trace: states");
             if (tv.size() != nv.size() || tv.size() != sv.size()) {
               throw InvalidArgument("Trace: times, nodes and states must be 1-D arrays of one length");
             }
             sim::Trace t;
             t.node_names = std::move(node_names);
             t.transitions.resize(tv.size());
             for (std::size_t i = 0; i < tv.size(); ++i) {
               if (sv[i] != 0 && sv[i] != 1) {
                 throw InvalidArgument("Trace: states[" + std::to_string(i) +
                                       "] must be 0 (busy) or 1 (idle)");
               }
               t.transitions[i] = {tv[i], nv[i], static_cast<sim::NodeState>(sv[i])};
             }
             std::string error;
             if (!t.IsValid(&error)) throw InvalidArgument("Trace: " + error);
             return t;
           }),
           py::arg("node_names"), py::arg("times"), py::arg("nodes"), py::arg("states"),
           "Builds a trace from node names and parallel arrays (state 1 = idle, 0 = busy); validated.")
      .def_readonly("node_names", &sim::Trace::node_names)
      .def_property_readonly("times",
                             [](const sim::Trace& t) {
                               return Column<std::int64_t>(t.transitions,
                                                           [](const sim::Transition& x) { return x.time_s; });
                             })
      .def_property_readonly("nodes",
                             [](const sim::Trace& t) {
                               return Column<std::int64_t>(t.transitions,
                                                           [](const sim::Transition& x) { return x.node; });
                             })
      .def_property_readonly("states",
                             [](const sim::Trace& t) {
                               return Column<std::int8_t>(t.transitions, [](const sim::Transition& x) {
                                 return static_cast<int>(x.state);
                               });
                             })
      .def_property_readonly("first_time_s", &sim::Trace::first_time_s)
      .def_property_readonly("last_time_s", &sim::Trace::last_time_s)
      .def("find_node", &sim::Trace::FindNode, py::arg("name"))
      .def("__len__", [](const sim::Trace& t) { return t.transitions.size(); })
      .def("__repr__", [](const sim::Trace& t) {
        return "<Trace " + std::to_string(t.node_names.size()) + " nodes, " +
               std::to_string(t.transitions.size()) + " transitions, " + std::to_string(t.first_time_s()) +
               ".." + std::to_string(t.last_time_s()) + " s>";
      });

  const auto identity = [](auto x) { return x; };
  py::class_<sim::TraceStats>(m, "TraceStats", "Idle nodes over time and idle-hole lengths of a trace")
      .def_readonly("nodes", &sim::TraceStats::nodes)
      .def_readonly("transitions", &sim::TraceStats::transitions)
      .def_readonly("start_s", &sim::TraceStats::start_s)
      .def_readonly("end_s", &sim::TraceStats::end_s)
      .def_readonly("mean_idle_nodes", &sim::TraceStats::mean_idle_nodes)
      .def_readonly("p50_idle_nodes", &sim::TraceStats::p50_idle_nodes)
      .def_readonly("p90_idle_nodes", &sim::TraceStats::p90_idle_nodes)
      .def_readonly("p99_idle_nodes", &sim::TraceStats::p99_idle_nodes)
      .def_readonly("max_idle_nodes", &sim::TraceStats::max_idle_nodes)
      .def_readonly("idle_node_s", &sim::TraceStats::idle_node_s)
      .def_property_readonly(
          "hole_lengths_s",
          [identity](const sim::TraceStats& s) { return Column<double>(s.hole_lengths_s, identity); })
      .def_readonly("holes_open_at_end", &sim::TraceStats::holes_open_at_end)
      .def_readonly("events_per_hour", &sim::TraceStats::events_per_hour)
      .def_property_readonly(
          "step_time_s",
          [identity](const sim::TraceStats& s) { return Column<std::int64_t>(s.step_time_s, identity); })
      .def_property_readonly("step_idle_nodes", [identity](const sim::TraceStats& s) {
        return Column<std::int64_t>(s.step_idle_nodes, identity);
      });
  m.def(
      "trace_stats",
      [](const sim::Trace& trace) {
        py::gil_scoped_release release;
        return sim::ComputeTraceStats(trace);
      },
      py::arg("trace"), "Idle nodes over time and idle-hole lengths of a trace (bft trace stats).");

  py::class_<sim::IdleLifetimePredictor>(
      m, "IdleLifetimePredictor", "How long an idle node will stay idle, from the idle holes seen so far")
      .def(py::init<double, int>(), py::arg("prior_s") = 1200.0, py::arg("min_holes") = 50)
      .def("observe_hole", &sim::IdleLifetimePredictor::ObserveHole, py::arg("length_s"))
      .def("expected_remaining", &sim::IdleLifetimePredictor::ExpectedRemaining, py::arg("age_s"))
      .def_property_readonly("holes", &sim::IdleLifetimePredictor::holes);
  py::class_<sim::ImportedTrace>(m, "ImportedTrace", "An idle-node trace imported from a scheduler log")
      .def_readonly("trace", &sim::ImportedTrace::trace)
      .def_readonly("machine_nodes", &sim::ImportedTrace::machine_nodes)
      .def_readonly("origin_s", &sim::ImportedTrace::origin_s)
      .def_readonly("end_s", &sim::ImportedTrace::end_s)
      .def_readonly("jobs_used", &sim::ImportedTrace::jobs_used)
      .def_readonly("jobs_skipped", &sim::ImportedTrace::jobs_skipped)
      .def_readonly("ignored_nodes", &sim::ImportedTrace::ignored_nodes)
      .def_readonly("ignored_examples", &sim::ImportedTrace::ignored_examples);
  m.attr("MAX_MACHINE_NODES") = sim::kMaxMachineNodes;
  m.attr("REFERENCE_START_EVENT") = sim::kReferenceStartEvent;
  m.def(
      "reference_start_s",
      [](const sim::Trace& trace) -> py::object {
        const std::optional<std::int64_t> start = sim::ReferenceStartS(trace);
        return start ? py::object(py::int_(*start)) : py::object(py::none());
      },
      py::arg("trace"),
      "The reference accounting's default window start (the trace's REFERENCE_START_EVENT-th distinct time), "
      "or None if the trace has fewer distinct times");
  m.def("expand_hostlist", &sim::ExpandHostlist, py::arg("expression"),
        py::arg("max_names") = sim::kMaxMachineNodes,
        "Expands a Slurm hostlist expression (c[01-03,07],gpu5) into node names (at most max_names).");
  m.def(
      "read_sacct_jobs",
      [](const std::string& path, const std::vector<std::string>& columns,
         const std::vector<std::string>& optional, std::uint64_t max_names) {
        // Each distinct node name is one Python string, shared by every job that ran on it: a month's
        // log names the same few thousand nodes millions of times.
        std::unordered_map<std::string, std::int32_t> ids;
        std::vector<std::string> names;
        struct Job {
          long line;
          std::vector<std::string> fields;
          std::vector<std::int32_t> nodes;
        };
        std::vector<Job> jobs;
        {
          py::gil_scoped_release release;
          sim::ForEachSacctJob(path, columns, optional, max_names, [&](sim::SacctJobLine& line) {
            Job& job = jobs.emplace_back(Job{line.line, std::move(line.fields), {}});
            job.nodes.reserve(line.nodes.size());
            for (std::string& n : line.nodes) {
              const auto [it, added] = ids.try_emplace(n, static_cast<std::int32_t>(names.size()));
              if (added) names.push_back(std::move(n));
              job.nodes.push_back(it->second);
            }
          });
        }
        std::vector<py::str> shared(names.begin(), names.end());
        py::list out(jobs.size());
        for (std::size_t k = 0; k < jobs.size(); ++k) {
          py::list nodes(jobs[k].nodes.size());
          for (std::size_t i = 0; i < jobs[k].nodes.size(); ++i) nodes[i] = shared[jobs[k].nodes[i]];
          out[k] = py::make_tuple(jobs[k].line, py::cast(jobs[k].fields), nodes);
        }
        return out;
      },
      py::arg("path"), py::arg("columns"), py::arg("optional"), py::arg("max_names"),
      "The job lines of a sacct --parsable2 log, as (line, [fields of `columns`], [node names]): the one "
      "reader of the format (the importer's); more than max_names node names in the file is a ValueError.");
  m.def("parse_sacct_time", &sim::ParseSacctTime, py::arg("text"),
        "A time as sacct prints it (Unix seconds or YYYY-MM-DDTHH:MM:SS) in seconds.");
  m.def(
      "import_sacct",
      [](const std::string& path, const std::vector<std::string>& machine_nodes,
         std::optional<std::int64_t> start_s, std::optional<std::int64_t> end_s) {
        py::gil_scoped_release release;
        sim::SacctImportOptions options;
        options.machine_nodes = machine_nodes;
        options.start_s = start_s;
        options.end_s = end_s;
        return sim::ImportSacct(path, options);
      },
      py::arg("path"), py::arg("machine_nodes"), py::arg("start_s") = py::none(),
      py::arg("end_s") = py::none());
  m.def(
      "import_swf",
      [](const std::string& path, int procs_per_node, int machine_nodes) {
        py::gil_scoped_release release;
        sim::SwfImportOptions options;
        options.procs_per_node = procs_per_node;
        options.machine_nodes = machine_nodes;
        return sim::ImportSwf(path, options);
      },
      py::arg("path"), py::arg("procs_per_node"), py::arg("machine_nodes") = 0);

  m.def(
      "read_trace",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return sim::ReadTrace(path);
      },
      py::arg("path"), "Reads a time,node,state CSV trace (plain or gzip).");
  m.def(
      "parse_trace",
      [](const std::string& text, const std::string& source) {
        py::gil_scoped_release release;
        return sim::ParseTrace(text, source);
      },
      py::arg("text"), py::arg("source") = "<trace>");
  m.def(
      "write_trace",
      [](const sim::Trace& trace, const std::string& path) {
        py::gil_scoped_release release;
        sim::WriteTrace(trace, path);
      },
      py::arg("trace"), py::arg("path"));
  m.def(
      "generate_synthetic",
      [](std::uint64_t seed, int nodes, double duration_s, double mean_idle_nodes, double mean_block_nodes,
         double median_idle_s, double idle_sigma, int jobs, double mean_interarrival_s) {
        sim::SyntheticOptions o;
        o.seed = seed;
        o.nodes = nodes;
        o.duration_s = duration_s;
        o.mean_idle_nodes = mean_idle_nodes;
        o.mean_block_nodes = mean_block_nodes;
        o.median_idle_s = median_idle_s;
        o.idle_sigma = idle_sigma;
        o.jobs = jobs;
        o.mean_interarrival_s = mean_interarrival_s;
        sim::SyntheticWorkload w;
        {
          py::gil_scoped_release release;
          w = sim::GenerateSynthetic(o);
        }
        return py::make_tuple(std::move(w.trace), std::move(w.jobs));
      },
      py::arg("seed") = sim::SyntheticOptions{}.seed, py::arg("nodes") = sim::SyntheticOptions{}.nodes,
      py::arg("duration_s") = sim::SyntheticOptions{}.duration_s,
      py::arg("mean_idle_nodes") = sim::SyntheticOptions{}.mean_idle_nodes,
      py::arg("mean_block_nodes") = sim::SyntheticOptions{}.mean_block_nodes,
      py::arg("median_idle_s") = sim::SyntheticOptions{}.median_idle_s,
      py::arg("idle_sigma") = sim::SyntheticOptions{}.idle_sigma,
      py::arg("jobs") = sim::SyntheticOptions{}.jobs,
      py::arg("mean_interarrival_s") = sim::SyntheticOptions{}.mean_interarrival_s,
      "The synthetic idle-node trace and job mix of `bft replay`'s default: (Trace, [JobSpec]).");

  // The replay's defaults and mode names, read from ReplayOptions and the enums' ToString: the one
  // home of each (bft.sim, bft replay and the runtime read them from here).
  const sim::ReplayOptions defaults;
  m.attr("DEFAULT_MILP_TIME_LIMIT_S") = sim::kDefaultReplayMilpTimeLimitS;
  m.attr("DEFAULT_MAX_JOBS") = defaults.max_jobs;
  m.attr("DEFAULT_TFWD_S") = defaults.tfwd_s;
  m.attr("DEFAULT_POLICY") = defaults.solve.solver;
  m.attr("DEFAULT_CURVES") = sim::ToString(defaults.curves);
  m.attr("DEFAULT_ACCOUNTING") = sim::ToString(defaults.accounting);
  m.attr("DEFAULT_CONFIGURATIONS") = sim::ToString(defaults.configurations);
  m.attr("CURVE_MODES") =
      py::make_tuple(sim::ToString(sim::CurveMode::kOracle), sim::ToString(sim::CurveMode::kLearned));
  // Learned modes that learn only the curves or only the rescale costs: diagnostics (docs/sim.md).
  m.attr("DIAGNOSTIC_CURVE_MODES") = py::make_tuple(sim::ToString(sim::CurveMode::kLearnedCurves),
                                                    sim::ToString(sim::CurveMode::kLearnedCosts));
  m.attr("ACCOUNTINGS") =
      py::make_tuple(sim::ToString(sim::Accounting::kContinuous), sim::ToString(sim::Accounting::kReference));
  m.attr("CONFIGURATION_MODES") = py::make_tuple(sim::ToString(sim::ConfigurationMode::kChoose),
                                                 sim::ToString(sim::ConfigurationMode::kFullOnly));
  m.def(
      "replay",
      [](const sim::Trace& trace, const std::vector<sim::JobSpec>& jobs, const std::string& policy,
         const std::string& curves, int max_jobs, double tfwd_s, std::vector<std::string> nodes,
         std::optional<double> start_s, std::optional<double> end_s, bool record_job_progress,
         bool record_assignments, std::optional<std::string> milp_backend, std::optional<double> time_limit_s,
         bool isolate, std::optional<curve::AdvisorOptions> advisor, py::object on_progress,
         const std::string& accounting, const std::string& configurations, std::vector<std::string> models) {
        sim::ReplayOptions o;
        o.models = std::move(models);
        if (advisor) o.advisor = *advisor;
        o.solve.solver = policy;
        if (milp_backend) o.solve.milp_backend = *milp_backend;
        if (time_limit_s) o.solve.milp.time_limit_s = *time_limit_s;
        o.solve.milp.isolate = isolate;
        o.curves = sim::CurveModeFromString(curves);
        o.accounting = sim::AccountingFromString(accounting);
        o.configurations = sim::ConfigurationModeFromString(configurations);
        o.max_jobs = max_jobs;
        o.tfwd_s = tfwd_s;
        o.nodes = std::move(nodes);
        o.start_s = start_s;
        o.end_s = end_s;
        o.record_job_progress = record_job_progress;
        o.record_assignments = record_assignments;
        if (!on_progress.is_none()) {
          py::function f = on_progress;
          o.on_progress = [f](double fraction) {
            py::gil_scoped_acquire acquire;
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            f(fraction);
          };
        }
        // Ctrl-C stops the replay, within a MILP solve too, and raises KeyboardInterrupt.
        const SigintScope sigint;
        o.solve.milp.interrupt = SigintScope::Poll();
        sim::ReplayResult result;
        try {
          py::gil_scoped_release release;
          result = sim::Replay(trace, jobs, o);
        } catch (const Interrupted&) {
          o.on_progress = nullptr;
          ThrowIfSignalled();  // KeyboardInterrupt (and the pending signal is consumed)
          throw;
        }
        o.on_progress = nullptr;  // drop the Python callback while holding the GIL
        return ResultToDict(result);
      },
      py::arg("trace"), py::arg("jobs"), py::arg("policy") = defaults.solve.solver,
      py::arg("curves") = sim::ToString(defaults.curves), py::arg("max_jobs") = defaults.max_jobs,
      py::arg("tfwd_s") = defaults.tfwd_s, py::arg("nodes") = std::vector<std::string>{},
      py::arg("start_s") = py::none(), py::arg("end_s") = py::none(), py::arg("record_job_progress") = true,
      py::arg("record_assignments") = false, py::arg("milp_backend") = py::none(),
      py::arg("time_limit_s") = py::none(), py::arg("isolate") = true, py::arg("advisor") = py::none(),
      py::arg("on_progress") = py::none(), py::arg("accounting") = sim::ToString(defaults.accounting),
      py::arg("configurations") = sim::ToString(defaults.configurations),
      py::arg("models") = std::vector<std::string>{},
      "Replays the trace with the jobs under one policy (the GIL is released). Returns a dict: summary, "
      "steps, "
      "jobs, progress, assignments (columns as numpy arrays).");
}

}  // namespace bft::python
