// The CBC backend (library bft::cbc, EPL-2.0), through CBC 2.10's C interface. Built only when
// coinor-libcbc-dev is found at configure time. Its quirks and how they are handled: docs/milp.md.
#pragma once

#include <memory>

#include "bft/milp.h"

namespace bft::milp {

// Clp, CBC's LP solver, treats finite values from 1e15 in magnitude as infinite (its "large
// value"): `max x s.t. x <= 1e15` came back unbounded, and a row bound of 1e15 gave a wrong point
// labelled optimal. The CBC backend answers a model holding a finite bound, right-hand side or
// breakpoint that large with Termination::kError naming it, never with a wrong answer.
inline constexpr double kCbcLargestMagnitude = 1e15;
// Clp can also lose track of an optimum where an unbounded variable must be large (beyond 1e10
// without presolve) and call the model unbounded. Such a verdict is checked by a solve with every
// infinite variable bound replaced by this bound: an optimum with none of them at it is the answer.
inline constexpr double kCbcArtificialBound = 1e14;

std::unique_ptr<Backend> MakeCbcBackend();
// Registers MakeCbcBackend under the name "cbc".
void RegisterCbcBackend();
}  // namespace bft::milp
