// FindViolation: the check every backend's solution passes before it is reported (SolveFrame).
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

TEST_F(MilpSolutionCheck, AnOptimalClaimOnABrokenPointBecomesAnErrorWithoutThePoint) {
  Result r;
  r.backend = "glpk";
  r.termination = Termination::kOptimal;
  r.message = "integer optimal";
  r.has_solution = true;
  r.values = {4, 3, 8};
  internal::RejectPointThatBreaksModel(model_, &r);
  EXPECT_EQ(r.termination, Termination::kError);
  EXPECT_FALSE(r.has_solution);
  EXPECT_TRUE(r.values.empty());
  EXPECT_EQ(
      r.message,
      "glpk returned a point that breaks the model (it said optimal: integer optimal): constraint 'cap' "
      "has activity 10 outside [-inf, 8]");
}

TEST_F(MilpSolutionCheck, AGoodPointIsPassedOnUntouched) {
  Result r;
  r.backend = "cbc";
  r.termination = Termination::kOptimal;
  r.message = "optimal";
  r.has_solution = true;
  r.values = {4, 2, 8};
  internal::RejectPointThatBreaksModel(model_, &r);
  EXPECT_EQ(r.termination, Termination::kOptimal);
  EXPECT_EQ(r.message, "optimal");
  EXPECT_EQ(r.values.size(), 3u);
}

}  // namespace
}  // namespace bft::milp
