// bft._core.jobs: the job format (bft/jobs.h): JobSpec, Configuration, the workload reader and
// writer, the field tables, and job dicts read through the one validator (jobs::JobFromFields).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bft/jobs.h"
#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

// A number as the job format takes it: int, float or a numpy number, not a bool.
bool IsNumber(py::handle v) {
  static const py::object real = py::module_::import("numbers").attr("Real");
  static const py::object numpy_bool = py::module_::import("numpy").attr("bool_");
  return !PyBool_Check(v.ptr()) && py::isinstance(v, real) && !py::isinstance(v, numpy_bool);
}

bool IsMapping(py::handle v) {
  static const py::object mapping = py::module_::import("collections.abc").attr("Mapping");
  return py::isinstance(v, mapping);
}

jobs::Value Other(py::handle v) {
  jobs::Value out;
  out.kind = jobs::Value::Kind::kOther;
  out.text = py::repr(v).cast<std::string>();
  return out;
}

std::vector<jobs::Field> FieldsOf(py::handle mapping);

// A dict's value as the JSON reader would give it: a string, a number, a list (tuple, 1-d array) of
// numbers or of dicts; anything else is kOther, which the validator reports with its repr.
jobs::Value ValueOf(py::handle v) {
  jobs::Value out;
  if (py::isinstance<py::str>(v)) {
    out.kind = jobs::Value::Kind::kString;
    out.text = v.cast<std::string>();
    return out;
  }
  if (IsNumber(v)) {
    const double x = PyFloat_AsDouble(v.ptr());
    if (x == -1.0 && PyErr_Occurred()) {  // an int beyond a double's range
      PyErr_Clear();
      return Other(v);
    }
    out.number = x;
    return out;
  }
  if (py::isinstance<py::bytes>(v) || IsMapping(v) || !PySequence_Check(v.ptr())) return Other(v);
  out.kind = jobs::Value::Kind::kNumberArray;
  for (py::handle item : py::reinterpret_borrow<py::iterable>(v)) {
    if (IsNumber(item) && out.objects.empty()) {
      out.array.push_back(ValueOf(item).number);
    } else if (IsMapping(item) && out.array.empty()) {
      out.kind = jobs::Value::Kind::kObjectArray;
      out.objects.push_back(FieldsOf(item));
    } else {
      return Other(v);  // a mixed list, a nested list, strings...
    }
  }
  return out;
}

std::vector<jobs::Field> FieldsOf(py::handle mapping) {
  std::vector<jobs::Field> fields;
  const py::dict dict(py::reinterpret_borrow<py::object>(mapping));
  for (const auto& [key, value] : dict) {
    if (!py::isinstance<py::str>(key)) {
      throw InvalidArgument("field names must be strings, got " + py::repr(key).cast<std::string>());
    }
    fields.push_back({key.cast<std::string>(), ValueOf(value)});
  }
  return fields;
}

py::list FieldTable(const std::vector<jobs::JobField>& table, bool with_allocation) {
  py::list out;
  for (const jobs::JobField& f : table) {
    if (with_allocation) {
      out.append(py::make_tuple(f.name, f.required, f.for_allocation));
    } else {
      out.append(py::make_tuple(f.name, f.required));
    }
  }
  return out;
}

}  // namespace

void BindJobs(py::module_& m) {
  py::class_<jobs::Configuration>(
      m, "Configuration", "Another way to run a job (structured partial backpropagation, docs/spb.md)")
      .def(py::init([](std::string name, curve::ThroughputCurve objective, py::object throughput,
                       double efficiency) {
             jobs::Configuration c;
             c.name = std::move(name);
             c.objective = std::move(objective);
             if (!throughput.is_none()) c.throughput = throughput.cast<curve::ThroughputCurve>();
             c.efficiency = efficiency;
             return c;
           }),
           py::arg("name"), py::arg("objective"), py::arg("throughput") = py::none(),
           py::arg("efficiency") = 1.0)
      .def_readwrite("name", &jobs::Configuration::name)
      .def_readwrite("objective", &jobs::Configuration::objective)
      .def_readwrite("throughput", &jobs::Configuration::throughput)
      .def_readwrite("efficiency", &jobs::Configuration::efficiency)
      .def(
          "is_valid",
          [](const jobs::Configuration& c) {
            std::string error;
            const bool ok = c.IsValid(&error);
            return py::make_tuple(ok, error);
          },
          "(True, '') or (False, why)")
      .def("__repr__", [](const jobs::Configuration& c) {
        return "Configuration('" + c.name + "', efficiency " + std::to_string(c.efficiency) + ")";
      });

  py::class_<jobs::JobSpec>(m, "JobSpec", "One elastic training job of a workload.")
      .def(py::init<>())
      .def_readwrite("name", &jobs::JobSpec::name)
      .def_readwrite("submit_s", &jobs::JobSpec::submit_s)
      .def_readwrite("min_nodes", &jobs::JobSpec::min_nodes)
      .def_readwrite("max_nodes", &jobs::JobSpec::max_nodes)
      .def_readwrite("work", &jobs::JobSpec::work)
      .def_readwrite("scale_up_s", &jobs::JobSpec::scale_up_s)
      .def_readwrite("scale_down_s", &jobs::JobSpec::scale_down_s)
      .def_readwrite("restart_s", &jobs::JobSpec::restart_s)
      .def_readwrite("weight", &jobs::JobSpec::weight)
      .def_readwrite("configurations", &jobs::JobSpec::configurations,
                     "Other ways to run the job (bft.jobs.Configuration, with throughput set); `work` counts "
                     "samples at full backpropagation (docs/spb.md).")
      .def_property(
          "nodes", [](const jobs::JobSpec& j) { return j.throughput.nodes(); },
          [](jobs::JobSpec& j, const std::vector<int>& nodes) {
            j.throughput = curve::ThroughputCurve(nodes, j.throughput.nodes() == nodes
                                                             ? j.throughput.values()
                                                             : std::vector<double>(nodes.size()));
            j.objective = curve::ThroughputCurve(nodes, j.objective.nodes() == nodes
                                                            ? j.objective.values()
                                                            : std::vector<double>(nodes.size()));
          },
          "Node counts of the curve breakpoints (shared by throughput and objective).")
      .def_property(
          "throughput", [](const jobs::JobSpec& j) { return j.throughput.values(); },
          [](jobs::JobSpec& j, const std::vector<double>& v) {
            j.throughput = curve::ThroughputCurve(j.throughput.nodes(), v);
          },
          "samples/s at `nodes`.")
      .def_property(
          "objective", [](const jobs::JobSpec& j) { return j.objective.values(); },
          [](jobs::JobSpec& j, const std::vector<double>& v) {
            j.objective = curve::ThroughputCurve(j.objective.nodes(), v);
          },
          "The allocator's value at `nodes`.")
      .def(
          "throughput_at", [](const jobs::JobSpec& j, double n) { return j.throughput.Evaluate(n); },
          py::arg("n"))
      .def("is_valid",
           [](const jobs::JobSpec& j) {
             std::string error;
             const bool ok = j.IsValid(&error);
             return py::make_tuple(ok, error);
           })
      .def("__repr__", [](const jobs::JobSpec& j) {
        return "<JobSpec " + j.name + " submit=" + std::to_string(j.submit_s) +
               " nodes=" + std::to_string(j.min_nodes) + ".." + std::to_string(j.max_nodes) + ">";
      });

  m.def(
      "read_jobs",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return jobs::ReadJobs(path);
      },
      py::arg("path"), "Reads a JSONL workload.");
  m.def(
      "parse_jobs",
      [](const std::string& text, const std::string& source) {
        py::gil_scoped_release release;
        return jobs::ParseJobs(text, source);
      },
      py::arg("text"), py::arg("source") = "<jobs>");
  m.def(
      "write_jobs",
      [](const std::vector<jobs::JobSpec>& specs, const std::string& path) {
        py::gil_scoped_release release;
        jobs::WriteJobs(specs, path);
      },
      py::arg("jobs"), py::arg("path"));
  m.def(
      "job_from_dict",
      [](py::handle fields, bool for_allocation) {
        if (!IsMapping(fields)) {
          throw InvalidArgument("expected a dict of job fields, got " +
                                std::string(py::str(py::type::handle_of(fields).attr("__name__"))));
        }
        return jobs::JobFromFields(FieldsOf(fields),
                                   for_allocation ? jobs::Use::kAllocation : jobs::Use::kWorkload);
      },
      py::arg("fields"), py::arg("for_allocation") = false,
      "The job a dict of workload fields describes, checked as a workload line is (for_allocation: "
      "submit and work may be absent). Raises ValueError naming the job and the field.");
  m.def(
      "job_fields", [] { return FieldTable(jobs::JobFields(), true); },
      "The fields of a workload job line: (name, required, read by the allocator), in file order");
  m.def(
      "configuration_fields", [] { return FieldTable(jobs::ConfigurationFields(), false); },
      "The fields of one element of a job's \"configurations\": (name, required), in file order");
  m.attr("MAX_SAMPLES_PER_S") = jobs::kMaxSamplesPerS;
}

}  // namespace bft::python
