// pybind11 bindings of bft::alloc (submodule bft._core.alloc): jobs, the solve call (GIL
// released) and the allocation with its per-job figures as numpy arrays. The Pythonic entry point
// is bft.allocate (python/bft/alloc.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <unordered_map>

#include "bft/alloc.h"
#include "bft/jobs.h"
#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

using alloc::Allocation;
using alloc::Goal;
using alloc::Job;
using alloc::JobAllocation;
using alloc::NodeId;

template <typename T>
py::array_t<T> ToNumpy(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

template <typename T, typename F>
py::array_t<T> PerJob(const Allocation& a, F field) {
  py::array_t<T> out(static_cast<py::ssize_t>(a.jobs.size()));
  T* data = out.mutable_data();
  for (std::size_t j = 0; j < a.jobs.size(); ++j) data[j] = field(a.jobs[j]);
  return out;
}

}  // namespace

void BindAlloc(py::module_& m) {
  BindEnum<alloc::AllocationStatus>(m, "AllocationStatus",
                                    "What an allocation is (apart from why a MILP solver stopped)",
                                    {{"OPTIMAL", alloc::AllocationStatus::kOptimal},
                                     {"HEURISTIC", alloc::AllocationStatus::kHeuristic},
                                     {"TIME_LIMIT", alloc::AllocationStatus::kTimeLimit},
                                     {"FAILED", alloc::AllocationStatus::kFailed}});
  BindEnum<Goal>(m, "Goal", "What the allocator maximises",
                 {{"THROUGHPUT", Goal::kThroughput}, {"MAX_MIN_FAIR", Goal::kMaxMinFair}});
  m.def("goal_from_string", &alloc::GoalFromString, py::arg("name"));
  m.def(
      "goal_names",
      [] {
        std::vector<std::string> names;
        for (Goal goal : {Goal::kThroughput, Goal::kMaxMinFair}) names.emplace_back(alloc::ToString(goal));
        return names;
      },
      "The goal names, throughput (the default) first");
  m.attr("DEFAULT_TFWD_S") = alloc::kDefaultTfwdS;
  // SolveOptions' defaults, read by bft.alloc and the command lines' help: one home for each.
  const alloc::SolveOptions solve_defaults;
  m.attr("DEFAULT_SOLVER") = solve_defaults.solver;
  m.attr("DEFAULT_GOAL") = alloc::ToString(solve_defaults.goal);
  m.attr("DEFAULT_MILP_BACKEND") = solve_defaults.milp_backend;
  m.attr("DEFAULT_RELATIVE_GAP") = solve_defaults.milp.relative_gap;
  m.attr("MAX_HORIZON_S") = alloc::kMaxHorizonS;
  py::class_<alloc::PolicyInfo>(m, "PolicyInfo", "A registered policy: its name and the inputs it reads")
      .def_readonly("name", &alloc::PolicyInfo::name)
      .def_property_readonly("inputs",
                             [](const alloc::PolicyInfo& p) {
                               std::vector<std::string> names;
                               for (alloc::PolicyInput input : p.inputs)
                                 names.emplace_back(alloc::ToString(input));
                               return names;
                             })
      .def_readonly("solves_milp", &alloc::PolicyInfo::solves_milp)
      .def("__repr__", [](const alloc::PolicyInfo& p) { return "PolicyInfo('" + p.name + "')"; });
  m.def("policies", &alloc::Policies, py::return_value_policy::copy,
        "Every registered policy, exact first: the one list of policy names");
  m.def("find_policy", &alloc::FindPolicy, py::arg("name"), py::return_value_policy::copy,
        "The registered policy of that name (ValueError naming the policies there are otherwise)");

  py::class_<Job>(m, "Job", "An elastic training job as the allocator sees it")
      .def(py::init([](std::string id, int min_nodes, int max_nodes, curve::ThroughputCurve objective,
                       py::object throughput, double scale_up_s, double scale_down_s, double weight,
                       double restart_s) {
             Job job;
             job.id = std::move(id);
             job.min_nodes = min_nodes;
             job.max_nodes = max_nodes;
             job.objective = std::move(objective);
             if (!throughput.is_none()) job.throughput = throughput.cast<curve::ThroughputCurve>();
             job.scale_up_s = scale_up_s;
             job.scale_down_s = scale_down_s;
             job.weight = weight;
             job.restart_s = restart_s;
             return job;
           }),
           py::arg("id"), py::arg("min_nodes"), py::arg("max_nodes"), py::arg("objective"),
           py::arg("throughput") = py::none(), py::arg("scale_up_s") = 0.0, py::arg("scale_down_s") = 0.0,
           py::arg("weight") = 1.0, py::kw_only(), py::arg("restart_s") = 0.0)
      .def_readwrite("id", &Job::id)
      .def_readwrite("min_nodes", &Job::min_nodes)
      .def_readwrite("max_nodes", &Job::max_nodes)
      .def_readwrite("objective", &Job::objective)
      .def_readwrite("throughput", &Job::throughput)
      .def_readwrite("scale_up_s", &Job::scale_up_s)
      .def_readwrite("scale_down_s", &Job::scale_down_s)
      .def_readwrite("restart_s", &Job::restart_s)
      .def_readwrite("weight", &Job::weight)
      .def_readwrite("remaining_samples", &Job::remaining_samples)
      .def_readwrite("configurations", &Job::configurations)
      .def_readwrite("configuration", &Job::configuration)
      .def("__repr__", [](const Job& j) {
        std::ostringstream os;
        os << "Job('" << j.id << "', nodes " << j.min_nodes << ".." << j.max_nodes << ")";
        return os.str();
      });

  m.def("from_job_spec", &alloc::FromJobSpec, py::arg("spec"),
        "The allocator's view of a job of the format (bft.jobs.JobSpec)");

  py::class_<alloc::NodeNames>(
      m, "NodeNames", "Node names (\"c05n06\") <-> the allocator's node ids, in order of first intern")
      .def(py::init<>())
      .def("intern", &alloc::NodeNames::Intern, py::arg("name"),
           "The name's id, adding the name if it is new")
      .def("find", &alloc::NodeNames::Find, py::arg("name"), "The name's id, or -1")
      .def("name", &alloc::NodeNames::Name, py::arg("id"), "The name of an interned id")
      .def(
          "names",
          [](const alloc::NodeNames& names, const std::vector<NodeId>& ids) {
            std::vector<std::string> out;
            out.reserve(ids.size());
            for (NodeId id : ids) out.push_back(names.Name(id));
            return out;
          },
          py::arg("ids"), "The names of interned ids, in order")
      .def("__len__", &alloc::NodeNames::size);

  py::class_<JobAllocation>(m, "JobAllocation", "One job's part of an allocation")
      .def_readonly("id", &JobAllocation::id)
      .def_readonly("nodes_before", &JobAllocation::nodes_before)
      .def_readonly("nodes_after", &JobAllocation::nodes_after)
      .def_readonly("configuration", &JobAllocation::configuration)
      .def_property_readonly("kept", [](const JobAllocation& j) { return ToNumpy(j.kept); })
      .def_property_readonly("added", [](const JobAllocation& j) { return ToNumpy(j.added); })
      .def_property_readonly("released", [](const JobAllocation& j) { return ToNumpy(j.released); })
      .def_readonly("rate", &JobAllocation::rate)
      .def_readonly("value", &JobAllocation::value)
      .def_readonly("penalty", &JobAllocation::penalty)
      .def("__repr__", [](const JobAllocation& j) {
        std::ostringstream os;
        os << "JobAllocation('" << j.id << "', " << j.nodes_before << " -> " << j.nodes_after << " nodes)";
        return os.str();
      });

  py::class_<Allocation>(m, "Allocation",
                         "The new node -> job map and, per job, nodes kept/added/released and figures")
      .def_readonly("jobs", &Allocation::jobs)
      .def_readonly("objective", &Allocation::objective)
      .def_readonly("min_normalized_value", &Allocation::min_normalized_value)
      .def_readonly("solver", &Allocation::solver)
      .def_readonly("status", &Allocation::status, "What the allocation is: AllocationStatus")
      .def_readonly("termination", &Allocation::termination,
                    "Why the MILP solver stopped: a bft.milp.Termination for the MILP solvers, None for the "
                    "others (they run no MILP); see status")
      .def_readonly("message", &Allocation::message)
      .def_readonly("wall_time_s", &Allocation::wall_time_s)
      .def_property_readonly("job_ids",
                             [](const Allocation& a) {
                               std::vector<std::string> ids;
                               for (const JobAllocation& j : a.jobs) ids.push_back(j.id);
                               return ids;
                             })
      .def_property_readonly("nodes_before",
                             [](const Allocation& a) {
                               return PerJob<int>(a, [](const JobAllocation& j) { return j.nodes_before; });
                             })
      .def_property_readonly("nodes_after",
                             [](const Allocation& a) {
                               return PerJob<int>(a, [](const JobAllocation& j) { return j.nodes_after; });
                             })
      .def_property_readonly("configuration",
                             [](const Allocation& a) {
                               return PerJob<int>(a, [](const JobAllocation& j) { return j.configuration; });
                             })
      .def_property_readonly("rate",
                             [](const Allocation& a) {
                               return PerJob<double>(a, [](const JobAllocation& j) { return j.rate; });
                             })
      .def_property_readonly("value",
                             [](const Allocation& a) {
                               return PerJob<double>(a, [](const JobAllocation& j) { return j.value; });
                             })
      .def_property_readonly("penalty",
                             [](const Allocation& a) {
                               return PerJob<double>(a, [](const JobAllocation& j) { return j.penalty; });
                             })
      .def_property_readonly("map_nodes",
                             [](const Allocation& a) {
                               py::array_t<NodeId> out(static_cast<py::ssize_t>(a.map.size()));
                               for (std::size_t k = 0; k < a.map.size(); ++k)
                                 out.mutable_data()[k] = a.map[k].node;
                               return out;
                             })
      .def_property_readonly("map_jobs",
                             [](const Allocation& a) {
                               // Index into `jobs` of the job each node of map_nodes runs.
                               std::unordered_map<std::string, int> index;
                               for (std::size_t j = 0; j < a.jobs.size(); ++j)
                                 index.emplace(a.jobs[j].id, static_cast<int>(j));
                               py::array_t<int> out(static_cast<py::ssize_t>(a.map.size()));
                               for (std::size_t k = 0; k < a.map.size(); ++k)
                                 out.mutable_data()[k] = index.at(a.map[k].job);
                               return out;
                             })
      .def_property_readonly("map",
                             [](const Allocation& a) {
                               py::dict out;
                               for (const alloc::Assignment& x : a.map)
                                 out[py::int_(x.node)] = py::str(x.job);
                               return out;
                             })
      .def("__repr__", [](const Allocation& a) {
        std::ostringstream os;
        os << "Allocation(" << a.solver << ", " << a.jobs.size() << " jobs, " << a.map.size()
           << " nodes used, objective " << a.objective << ", " << alloc::ToString(a.status) << ")";
        return os.str();
      });

  m.def(
      "solve",
      [](std::vector<Job> jobs, std::vector<NodeId> pool, std::vector<NodeId> current_nodes,
         std::vector<std::string> current_jobs, double tfwd_s, std::string solver, Goal goal,
         std::string milp_backend, double time_limit_s, double relative_gap, bool isolate,
         std::vector<double> expected_idle_s) {
        if (current_nodes.size() != current_jobs.size())
          throw InvalidArgument("current: " + std::to_string(current_nodes.size()) + " nodes but " +
                                std::to_string(current_jobs.size()) + " job ids");
        alloc::Problem problem;
        problem.jobs = std::move(jobs);
        problem.pool = std::move(pool);
        problem.current.reserve(current_nodes.size());
        for (std::size_t k = 0; k < current_nodes.size(); ++k)
          problem.current.push_back({current_nodes[k], std::move(current_jobs[k])});
        problem.tfwd_s = tfwd_s;
        problem.expected_idle_s = std::move(expected_idle_s);
        alloc::SolveOptions options;
        options.solver = std::move(solver);
        options.goal = goal;
        options.milp_backend = std::move(milp_backend);
        options.milp.time_limit_s = time_limit_s;
        options.milp.relative_gap = relative_gap;
        options.milp.isolate = isolate;
        // Ctrl-C stops a MILP allocation and raises KeyboardInterrupt.
        const SigintScope sigint;
        options.milp.interrupt = SigintScope::Poll();
        alloc::Allocation allocation;
        {
          py::gil_scoped_release release;
          allocation = alloc::Solve(problem, options);
        }
        ThrowIfSignalled();
        return allocation;
      },
      py::arg("jobs"), py::arg("pool"), py::arg("current_nodes"), py::arg("current_jobs"),
      py::arg("tfwd_s") = alloc::kDefaultTfwdS, py::arg("solver") = alloc::SolveOptions{}.solver,
      py::arg("goal") = alloc::SolveOptions{}.goal,
      py::arg("milp_backend") = alloc::SolveOptions{}.milp_backend, py::arg("time_limit_s") = milp::kInf,
      py::arg("relative_gap") = alloc::SolveOptions{}.milp.relative_gap, py::arg("isolate") = false,
      py::arg("expected_idle_s") = std::vector<double>{},
      "Solve one allocation problem (the GIL is released while solving; Ctrl-C stops it). "
      "current_nodes[k] runs current_jobs[k]; isolate: MILP solves in a child process.");
}

}  // namespace bft::python
