// GoogleTest main for every libbft suite: registers the MILP backends this build was made with.
#include <gtest/gtest.h>

#include "bft/milp.h"
#ifdef BFT_HAVE_GLPK
#include "bft/milp_glpk.h"
#endif
#ifdef BFT_HAVE_CBC
#include "bft/milp_cbc.h"
#endif

int main(int argc, char** argv) {
#ifdef BFT_HAVE_GLPK
  bft::milp::RegisterGlpkBackend();
#endif
#ifdef BFT_HAVE_CBC
  bft::milp::RegisterCbcBackend();
#endif
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
