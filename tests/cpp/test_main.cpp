// GoogleTest main for every libbft suite: registers the MILP backends this build was made with.
#include <gtest/gtest.h>

#include "milp/register_built_backends.h"

int main(int argc, char** argv) {
  bft::milp::internal::RegisterBuiltBackends();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
