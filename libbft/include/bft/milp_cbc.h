// The CBC backend (library bft::cbc, EPL-2.0), with native SOS2 for piecewise-linear terms.
// Built only when coinor-libcbc-dev is found at configure time.
#pragma once

#include <memory>

#include "bft/milp.h"

namespace bft::milp {
std::unique_ptr<Backend> MakeCbcBackend();
// Registers MakeCbcBackend under the name "cbc".
void RegisterCbcBackend();
}  // namespace bft::milp
