#include <pybind11/pybind11.h>

#include "bft/error.h"
#include "bft/milp.h"
#include "bft/version.h"
#include "bindings.h"
// Generated from the build's backend list (libbft/CMakeLists.txt): registers each built backend.
#include "milp/register_built_backends.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "libbft core: MILP model, throughput curves, allocator and replay simulator";
  m.attr("__version__") = bft::Version();
  m.attr("MAX_LINE_BYTES") = bft::kMaxLineBytes;  // the one line cap of every reader, C++ and Python

  // bft::Error and subclasses map onto the exceptions a Python user expects.
  static py::exception<bft::Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<bft::NotAvailable> not_available(m, "NotAvailable", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const bft::FileNotFound& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    } catch (const bft::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const bft::Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const bft::NotAvailable& e) {
      PyErr_SetString(not_available.ptr(), e.what());
    } catch (const bft::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  bft::milp::internal::RegisterBuiltBackends();

  auto milp = m.def_submodule("milp", "Solver-agnostic MILP model and backends");
  bft::python::BindMilp(milp);
  auto curve = m.def_submodule("curve", "Throughput curves, fitting and the profiling advisor");
  bft::python::BindCurve(curve);
  auto jobs = m.def_submodule("jobs", "The job format: JobSpec, the workload reader and the one validator");
  bft::python::BindJobs(jobs);
  auto alloc = m.def_submodule("alloc", "The node-to-job allocator");
  bft::python::BindAlloc(alloc);
  auto sim = m.def_submodule("sim", "Trace replay simulator");
  bft::python::BindSim(sim);
}
