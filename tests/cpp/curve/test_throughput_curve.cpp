#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bft/curve.h"

namespace bft::curve {
namespace {

TEST(CurvePiecewise, InterpolatesLinearlyBetweenBreakpointsAndFromZero) {
  const ThroughputCurve c({1, 4}, {10.0, 40.0});
  EXPECT_DOUBLE_EQ(c.Evaluate(0.0), 0.0);
  EXPECT_DOUBLE_EQ(c.Evaluate(0.5), 5.0);
  EXPECT_DOUBLE_EQ(c.Evaluate(2.0), 20.0);
  EXPECT_DOUBLE_EQ(c(4.0), 40.0);
}

TEST(CurvePiecewise, StaysFlatBeyondTheLastBreakpoint) {
  const ThroughputCurve c({0, 2, 8}, {0.0, 3.0, 9.0});
  EXPECT_DOUBLE_EQ(c.Evaluate(100.0), 9.0);
}

TEST(CurvePiecewise, TableListsEveryNodeCountFromZero) {
  const ThroughputCurve c({2}, {4.0});
  const auto t = c.Table(3);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0], 0.0);
  EXPECT_DOUBLE_EQ(t[1], 2.0);
  EXPECT_DOUBLE_EQ(t[3], 4.0);
  EXPECT_THROW(c.Table(-1), InvalidArgument);
}

TEST(CurvePiecewise, ResampleKeepsValuesAtTheNewBreakpoints) {
  const ThroughputCurve c({1, 4}, {10.0, 40.0});
  const auto r = c.Resample({0, 2, 4});
  EXPECT_EQ(r.nodes(), (std::vector<int>{0, 2, 4}));
  EXPECT_DOUBLE_EQ(r.values()[1], 20.0);
  EXPECT_THROW(c.Resample({2, 1}), InvalidArgument);
}

TEST(CurvePiecewise, RejectsInvalidBreakpointsNamingThem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string error;
  EXPECT_FALSE(ThroughputCurve::Check({1, 1}, {1.0, 2.0}, &error));
  EXPECT_NE(error.find("strictly increasing"), std::string::npos);
  EXPECT_FALSE(ThroughputCurve::Check({-1}, {1.0}, &error));
  EXPECT_NE(error.find("negative"), std::string::npos);
  EXPECT_FALSE(ThroughputCurve::Check({1}, {nan}, &error));
  EXPECT_NE(error.find("breakpoint 0"), std::string::npos);
  EXPECT_FALSE(ThroughputCurve::Check({1, 2}, {1.0}, &error));
  EXPECT_THROW(ThroughputCurve({1, 2}, {1.0, -2.0}), InvalidArgument);
}

TEST(CurvePiecewise, DefaultIsTheZeroCurve) {
  const ThroughputCurve c;
  EXPECT_TRUE(c.empty());
  EXPECT_DOUBLE_EQ(c.Evaluate(5.0), 0.0);
}

}  // namespace
}  // namespace bft::curve
