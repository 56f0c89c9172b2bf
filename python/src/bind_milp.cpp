#include "bindings.h"

namespace bft::python {
// Placeholder until the milp bindings land.
void BindMilp(pybind11::module_& /*m*/) {}
}  // namespace bft::python
