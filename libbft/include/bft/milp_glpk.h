// The GLPK backend (library bft::glpk, GPL-3). GLPK has no SOS2: piecewise-linear terms are
// mapped to an exact binary formulation. Solves use glp_intopt with presolve, a time limit and a
// relative MIP gap. Safe to call from several threads at once.
#pragma once

#include <memory>

#include "bft/milp.h"

namespace bft::milp {
std::unique_ptr<Backend> MakeGlpkBackend();
// Registers MakeGlpkBackend under the name "glpk".
void RegisterGlpkBackend();
}  // namespace bft::milp
