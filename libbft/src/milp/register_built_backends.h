// Registers every MILP backend this build was configured with. Targets that link the backend
// libraries get BFT_HAVE_GLPK / BFT_HAVE_CBC defined by CMake: the Python module, the test main
// and the benchmarks. (A C++ user calls Register*Backend() from bft/milp_glpk.h, bft/milp_cbc.h.)
#pragma once

#ifdef BFT_HAVE_GLPK
#include "bft/milp_glpk.h"
#endif
#ifdef BFT_HAVE_CBC
#include "bft/milp_cbc.h"
#endif

namespace bft::milp::internal {

inline void RegisterBuiltBackends() {
#ifdef BFT_HAVE_GLPK
  RegisterGlpkBackend();
#endif
#ifdef BFT_HAVE_CBC
  RegisterCbcBackend();
#endif
}

}  // namespace bft::milp::internal
