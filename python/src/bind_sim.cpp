#include "bindings.h"

namespace bft::python {
// Placeholder until the sim bindings land.
void BindSim(pybind11::module_& /*m*/) {}
}  // namespace bft::python
