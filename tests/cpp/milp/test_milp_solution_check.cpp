// FindViolation: the check every CBC solution passes before it is reported.
#include <gtest/gtest.h>

#include "bft/milp.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

using internal::FindViolation;

class MilpSolutionCheck : public ::testing::Test {
 protected:
  MilpSolutionCheck() {
    x_ = model_.AddInteger(0, 10, "x");
    z_ = model_.AddContinuous(0, 5, "z");
    model_.AddConstraint(x_ + 2 * z_ <= 8, "cap");
    y_ = model_.AddPiecewiseLinear(x_, {0, 5, 10}, {0, 10, 0}, "tent");
  }
  Model model_;
  Var x_, z_, y_;
};

TEST_F(MilpSolutionCheck, AcceptsAFeasiblePointWithinTolerance) {
  EXPECT_EQ(FindViolation(model_, {4, 2, 8}), "");
  EXPECT_EQ(FindViolation(model_, {4, 2 + 1e-9, 8 - 1e-9}), "");
}

TEST_F(MilpSolutionCheck, NamesTheBrokenRow) {
  EXPECT_NE(FindViolation(model_, {4, 3, 8}).find("constraint 'cap'"), std::string::npos);
}

TEST_F(MilpSolutionCheck, NamesTheVariableOutsideItsBoundsOrFractional) {
  EXPECT_NE(FindViolation(model_, {11, 0, 0}).find("variable 'x'"), std::string::npos);
  EXPECT_NE(FindViolation(model_, {2.5, 0, 5}).find("integer variable 'x'"), std::string::npos);
}

TEST_F(MilpSolutionCheck, CatchesAPiecewiseValueOffTheCurve) {
  // f is a tent: convexifying it (y = 10 at x = 0 or 10) is exactly the error to catch.
  EXPECT_NE(FindViolation(model_, {0, 0, 10}).find("piecewise-linear 'tent'"), std::string::npos);
  EXPECT_EQ(FindViolation(model_, {8, 0, 4}), "");
}

TEST_F(MilpSolutionCheck, RejectsAWrongNumberOfValues) {
  EXPECT_NE(FindViolation(model_, {1, 2}).find("2 values for 3 variables"), std::string::npos);
}

}  // namespace
}  // namespace bft::milp
