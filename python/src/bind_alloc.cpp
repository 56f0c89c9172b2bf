#include "bindings.h"

namespace bft::python {
// Placeholder until the alloc bindings land.
void BindAlloc(pybind11::module_& /*m*/) {}
}  // namespace bft::python
