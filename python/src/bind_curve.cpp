#include "bindings.h"

namespace bft::python {
// Placeholder until the curve bindings land.
void BindCurve(pybind11::module_& /*m*/) {}
}  // namespace bft::python
