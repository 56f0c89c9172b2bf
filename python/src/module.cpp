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
  // NotAvailable: a backend (or other part) this build lacks, named by the caller: a bft.Error, and a
  // ValueError too, since the name is the caller's input (bft.allocate says bad input is a ValueError).
  static PyObject* const not_available = PyErr_NewExceptionWithDoc(
      "bft._core.NotAvailable", "A part this build lacks (e.g. a MILP backend), named by the caller.",
      py::make_tuple(error, py::handle(PyExc_ValueError)).ptr(), nullptr);
  if (not_available == nullptr) throw py::error_already_set();
  m.attr("NotAvailable") = py::handle(not_available);
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
      PyErr_SetString(not_available, e.what());
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
