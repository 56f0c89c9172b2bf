// Declarations shared by the binding translation units of bft._core.
#pragma once

#include <pybind11/pybind11.h>

namespace bft::python {
void BindMilp(pybind11::module_& m);
void BindCurve(pybind11::module_& m);
void BindAlloc(pybind11::module_& m);
void BindSim(pybind11::module_& m);
}  // namespace bft::python
