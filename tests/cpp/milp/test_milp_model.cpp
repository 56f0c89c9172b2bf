// bft::milp model tests that need no backend: expressions, validation of bad input (every message
// names the variable or constraint), handles of other models, the registry, results, LP export.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "bft/milp.h"

namespace bft::milp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs `fn`, expects InvalidArgument, returns its message.
template <typename Fn>
std::string InvalidArgumentMessage(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected bft::InvalidArgument";
  return "";
}

TEST(MilpExpr, OperatorsBuildMergedSortedRows) {
  Model m("expr");
  Var x = m.AddContinuous(0, 10, "x");
  Var y = m.AddInteger(-5, 5, "y");
  m.AddConstraint(2 * x + 3 * y - x + 4 <= 10 + y, "c");
  const RowData& row = m.constraint(0);
  EXPECT_EQ(row.name, "c");
  ASSERT_EQ(row.vars, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(row.coefs[0], 1.0);  // 2x - x
  EXPECT_DOUBLE_EQ(row.coefs[1], 2.0);  // 3y - y
  EXPECT_EQ(row.lower, -kInf);
  EXPECT_DOUBLE_EQ(row.upper, 6.0);  // constant 4 - 10 moved to the bound
}

TEST(MilpExpr, EqualityAndGreaterEqualAndNegation) {
  Model m;
  Var x = m.AddContinuous(0, 1);
  Var y = m.AddContinuous(0, 1);
  m.AddConstraint(x + y == 1);
  m.AddConstraint(-(x - 2 * y) >= 0.5);
  EXPECT_DOUBLE_EQ(m.constraint(0).lower, 1.0);
  EXPECT_DOUBLE_EQ(m.constraint(0).upper, 1.0);
  EXPECT_EQ(m.constraint(1).coefs, (std::vector<double>{-1.0, 2.0}));
  EXPECT_DOUBLE_EQ(m.constraint(1).lower, 0.5);
  EXPECT_EQ(m.constraint(1).upper, kInf);
}

TEST(MilpExpr, TermsThatCancelAreDropped) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  Var y = m.AddContinuous(0, 1, "y");
  m.AddConstraint(x + y - x <= 1);
  EXPECT_EQ(m.constraint(0).vars, (std::vector<int>{1}));
}

TEST(MilpExpr, MixingModelsInOneExpressionThrows) {
  Model a, b;
  Var x = a.AddContinuous(0, 1);
  Var y = b.AddContinuous(0, 1);
  EXPECT_THAT(InvalidArgumentMessage([&] { (void)(x + y); }), HasSubstr("two models"));
}

TEST(MilpExpr, DefaultConstructedVarThrows) {
  EXPECT_THAT(InvalidArgumentMessage([] { LinExpr e(Var{}); }), HasSubstr("default-constructed"));
}

TEST(MilpModel, AutomaticNamesAreUnique) {
  Model m;
  Var named = m.AddContinuous(0, 1, "x1");
  Var a = m.AddContinuous(0, 1);
  Var b = m.AddContinuous(0, 1);
  EXPECT_EQ(m.var(named.index()).name, "x1");
  EXPECT_NE(m.var(a.index()).name, m.var(b.index()).name);
  EXPECT_NE(m.var(b.index()).name, "x1");  // index 1 would give "x1": made unique instead
}

TEST(MilpModel, CopyIsANewModel) {
  Model m("orig");
  Var x = m.AddContinuous(0, 1, "x");
  Model copy = m;
  EXPECT_NE(copy.id(), m.id());
  EXPECT_EQ(copy.num_vars(), 1);
  EXPECT_THAT(InvalidArgumentMessage([&] { copy.AddConstraint(x <= 1, "c"); }), HasSubstr("another model"));
  Model moved = std::move(copy);
  EXPECT_EQ(moved.num_vars(), 1);
}

// ---- bad input: each message names the variable or constraint -------------------------------

TEST(MilpBadInput, NaNCoefficientNamesConstraintAndVariable) {
  Model m;
  Var x = m.AddContinuous(0, 1, "speed");
  const std::string msg = InvalidArgumentMessage([&] { m.AddConstraint(kNaN * x <= 1, "cap"); });
  EXPECT_THAT(msg, HasSubstr("constraint 'cap'"));
  EXPECT_THAT(msg, HasSubstr("'speed'"));
  EXPECT_THAT(msg, HasSubstr("nan"));
  EXPECT_EQ(m.num_constraints(), 0);  // nothing half-added
}

TEST(MilpBadInput, InfiniteCoefficientNamesConstraint) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(kInf * x >= 0, "row7"); }),
              HasSubstr("constraint 'row7'"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.Maximize(-kInf * x); }), HasSubstr("objective"));
}

// GLPK aborts the process on a coefficient of 1e-200 and CBC on an objective coefficient of 1e25:
// magnitudes outside [kMinMagnitude, kMaxMagnitude] are refused when added, naming the culprit.
TEST(MilpBadInput, CoefficientMagnitudesOutsideTheSolversRangeNameTheConstraint) {
  Model m("mag");
  Var x = m.AddInteger(0, 10, "x");
  Var y = m.AddContinuous(0, 10, "y");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(1e-200 * x + y <= 5, "cap"); }),
              AllOf(HasSubstr("constraint 'cap'"), HasSubstr("variable 'x'"), HasSubstr("1e-200")));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(1e30 * y <= 5, "huge"); }),
              AllOf(HasSubstr("constraint 'huge'"), HasSubstr("variable 'y'"), HasSubstr("1e+30")));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.Maximize(1e25 * x); }),
              AllOf(HasSubstr("objective"), HasSubstr("variable 'x'")));
  // Terms that merge to a tiny non-zero coefficient are checked after merging.
  EXPECT_THAT(
      InvalidArgumentMessage([&] { m.AddConstraint(1e-20 * x - 0.99999999999e-20 * x <= 1, "merged"); }),
      HasSubstr("constraint 'merged'"));
  EXPECT_EQ(m.num_constraints(), 0);
  // The limits themselves are accepted, and exact zeros are dropped as before.
  m.AddConstraint(kMinMagnitude * x + kMaxMagnitude * y + 0.0 * x <= kMaxMagnitude, "edge");
  EXPECT_EQ(m.constraint(0).vars.size(), 2u);
}

TEST(MilpBadInput, BoundsAndBreakpointsBeyondTheSolversRangeAreRefused) {
  Model m("mag");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddContinuous(0, 1e30, "speed"); }),
              AllOf(HasSubstr("variable 'speed'"), HasSubstr("upper bound"), HasSubstr("1e+30")));
  Var x = m.AddContinuous(0, 10, "x");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(LinExpr(x) <= 1e25, "cap"); }),
              AllOf(HasSubstr("constraint 'cap'"), HasSubstr("upper bound")));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, 10}, {0, 1e21}, "f");
              }),
              AllOf(HasSubstr("piecewise-linear 'f'"), HasSubstr("breakpoint 1 y")));
  // A segment's rise becomes a coefficient of the backends' formulations.
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, 10, 20}, {0, 1e-250, 1}, "g");
              }),
              AllOf(HasSubstr("piecewise-linear 'g'"), HasSubstr("segment 0"), HasSubstr("rise")));
  EXPECT_TRUE(m.piecewise_linear().empty());
  m.AddPiecewiseLinear(x, {0, 10}, {1, 1}, "flat");  // a rise of exactly 0 has no coefficient
  EXPECT_EQ(m.piecewise_linear().size(), 1u);
}

TEST(MilpBadInput, NaNConstraintBoundAndConstant) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(LinExpr(x), kNaN, 1.0, "nanrow"); }),
              HasSubstr("constraint 'nanrow'"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(x + kInf <= 3, "infconst"); }),
              HasSubstr("constraint 'infconst'"));
}

TEST(MilpBadInput, ConstraintLowerAboveUpper) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  const std::string msg = InvalidArgumentMessage([&] { m.AddConstraint(LinExpr(x), 2.0, 1.0, "budget"); });
  EXPECT_THAT(msg, HasSubstr("constraint 'budget'"));
  EXPECT_THAT(msg, HasSubstr("lower bound 2 > upper bound 1"));
}

TEST(MilpBadInput, VariableLowerAboveUpper) {
  Model m;
  const std::string msg = InvalidArgumentMessage([&] { m.AddContinuous(3, 2, "nodes"); });
  EXPECT_THAT(msg, HasSubstr("variable 'nodes'"));
  EXPECT_THAT(msg, HasSubstr("lower bound 3 > upper bound 2"));
  EXPECT_EQ(m.num_vars(), 0);
}

TEST(MilpBadInput, VariableNaNAndEmptyInfiniteBounds) {
  Model m;
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddContinuous(kNaN, 1, "a"); }), HasSubstr("variable 'a'"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddContinuous(kInf, kInf, "b"); }), HasSubstr("variable 'b'"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddContinuous(-kInf, -kInf, "c"); }), HasSubstr("variable 'c'"));
}

TEST(MilpBadInput, FractionalBoundsOnIntegerVariable) {
  Model m;
  const std::string msg = InvalidArgumentMessage([&] { m.AddInteger(0.5, 4, "replicas"); });
  EXPECT_THAT(msg, HasSubstr("variable 'replicas'"));
  EXPECT_THAT(msg, HasSubstr("fractional bound 0.5"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddInteger(0, 2.25, "r2"); }), HasSubstr("2.25"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddVar(0, 2, VarType::kBinary, "b"); }),
              HasSubstr("variable 'b'"));
  EXPECT_NO_THROW(m.AddInteger(-kInf, kInf, "free_int"));
}

TEST(MilpBadInput, TooFewBreakpoints) {
  Model m;
  Var x = m.AddContinuous(0, 10, "load");
  const std::string msg = InvalidArgumentMessage([&] { m.AddPiecewiseLinear(x, {1.0}, {2.0}, "tput"); });
  EXPECT_THAT(msg, HasSubstr("piecewise-linear 'tput'"));
  EXPECT_THAT(msg, HasSubstr("'load'"));
  EXPECT_THAT(msg, HasSubstr("at least two breakpoints"));
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddPiecewiseLinear(x, {}, {}, "empty"); }),
              HasSubstr("at least two breakpoints"));
  EXPECT_EQ(m.num_vars(), 1);  // no output variable left behind
}

TEST(MilpBadInput, BreakpointsNotStrictlyIncreasing) {
  Model m;
  Var x = m.AddContinuous(0, 10, "x");
  const std::string msg = InvalidArgumentMessage([&] {
    m.AddPiecewiseLinear(x, {0, 1, 1, 2}, {0, 1, 2, 3}, "f");
  });
  EXPECT_THAT(msg, HasSubstr("piecewise-linear 'f'"));
  EXPECT_THAT(msg, HasSubstr("strictly increasing"));
  EXPECT_THAT(msg, HasSubstr("xs[2] = 1"));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {3, 2}, {0, 1}, "g");
              }),
              HasSubstr("strictly increasing"));
}

TEST(MilpBadInput, BreakpointSizeMismatchAndNonFinite) {
  Model m;
  Var x = m.AddContinuous(0, 10, "x");
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, 1, 2}, {0, 1}, "f");
              }),
              HasSubstr("3 breakpoint xs but 2 ys"));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, 1}, {0, kNaN}, "g");
              }),
              HasSubstr("not finite"));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, kInf}, {0, 1}, "h");
              }),
              HasSubstr("not finite"));
}

TEST(MilpBadInput, VariableFromAnotherModel) {
  Model a("a"), b("b");
  Var xa = a.AddContinuous(0, 1, "xa");
  b.AddContinuous(0, 1, "xb");
  EXPECT_THAT(InvalidArgumentMessage([&] { b.AddConstraint(xa <= 1, "cb"); }),
              AllOf(HasSubstr("constraint 'cb'"), HasSubstr("another model")));
  EXPECT_THAT(InvalidArgumentMessage([&] { b.Minimize(2 * xa); }),
              AllOf(HasSubstr("objective"), HasSubstr("another model")));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                b.AddPiecewiseLinear(xa, {0, 1}, {0, 1}, "pb");
              }),
              AllOf(HasSubstr("piecewise-linear 'pb'"), HasSubstr("another model")));
  EXPECT_THAT(InvalidArgumentMessage([&] { b.CheckOwns(Var{}, "thing"); }), HasSubstr("thing"));
}

TEST(MilpBadInput, DuplicateNames) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddBinary("x"); }), HasSubstr("duplicate variable name 'x'"));
  m.AddConstraint(x <= 1, "c");
  EXPECT_THAT(InvalidArgumentMessage([&] { m.AddConstraint(x >= 0, "c"); }),
              HasSubstr("duplicate constraint name 'c'"));
  EXPECT_THAT(InvalidArgumentMessage([&] {
                m.AddPiecewiseLinear(x, {0, 1}, {0, 1}, "x");
              }),
              HasSubstr("duplicate variable name 'x'"));
}

TEST(MilpBadInput, IndexOutOfRange) {
  Model m;
  EXPECT_THROW(m.var(0), InvalidArgument);
  EXPECT_THROW(m.constraint(-1), InvalidArgument);
  EXPECT_THROW(m.var_handle(3), InvalidArgument);
}

TEST(MilpOptions, IsValidExplainsWhatIsWrong) {
  SolveOptions options;
  std::string error;
  EXPECT_TRUE(options.IsValid(&error));
  options.time_limit_s = 0.0;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_THAT(error, HasSubstr("time_limit_s"));
  options.time_limit_s = kNaN;
  EXPECT_FALSE(options.IsValid(nullptr));
  options.time_limit_s = 1.0;
  options.relative_gap = -0.1;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_THAT(error, HasSubstr("relative_gap"));
  options.relative_gap = kInf;
  EXPECT_FALSE(options.IsValid(&error));
}

TEST(MilpResult, ValueWithoutSolutionThrows) {
  Result r;
  r.termination = Termination::kInfeasible;
  Model m;
  Var x = m.AddContinuous(0, 1);
  EXPECT_THROW(r.Value(x), Error);
  r.has_solution = true;
  r.values = {0.25};
  r.model_id = m.id();
  EXPECT_DOUBLE_EQ(r.Value(x), 0.25);
  EXPECT_DOUBLE_EQ(r.Value(4 * x + 1), 2.0);
  Model other;
  Var y = other.AddContinuous(0, 1);
  EXPECT_THROW(r.Value(y), InvalidArgument);
}

TEST(MilpResult, TerminationNames) {
  EXPECT_STREQ(ToString(Termination::kOptimal), "optimal");
  EXPECT_STREQ(ToString(Termination::kTimeLimit), "time_limit");
  EXPECT_STREQ(ToString(Termination::kInfeasible), "infeasible");
  EXPECT_STREQ(ToString(Termination::kUnbounded), "unbounded");
  EXPECT_STREQ(ToString(Termination::kInfeasibleOrUnbounded), "infeasible_or_unbounded");
  EXPECT_STREQ(ToString(Termination::kInterrupted), "interrupted");
  EXPECT_STREQ(ToString(Termination::kError), "error");
}

TEST(MilpRegistry, UnknownBackendListsRegisteredOnes) {
  try {
    MakeBackend("no-such-solver");
    FAIL() << "expected NotAvailable";
  } catch (const NotAvailable& e) {
    EXPECT_THAT(e.what(), HasSubstr("'no-such-solver'"));
    EXPECT_THAT(e.what(), HasSubstr("registered backends"));
  }
}

TEST(MilpRegistry, RegisteredBackendsAreSortedAndReplaceable) {
  class Fake : public Backend {
   public:
    std::string name() const override { return "zz-fake"; }
    Result Solve(const Model&, const SolveOptions&) const override {
      Result r;
      r.backend = "zz-fake";
      r.message = "fake";
      return r;
    }
  };
  RegisterBackend("zz-fake", [] { return std::make_unique<Fake>(); });
  RegisterBackend("zz-fake", [] { return std::make_unique<Fake>(); });  // replaces, no duplicate
  const auto names = RegisteredBackends();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::count(names.begin(), names.end(), "zz-fake"), 1);
  Model m;
  EXPECT_EQ(Solve(m, "zz-fake").message, "fake");
  EXPECT_THROW(RegisterBackend("empty", BackendFactory{}), InvalidArgument);
}

// ---- LP export ---------------------------------------------------------------------------------

TEST(MilpLpExport, WritesSectionsBoundsIntegersAndSos2) {
  Model m("export");
  Var x = m.AddContinuous(-kInf, 4, "x");
  Var y = m.AddContinuous(-kInf, kInf, "y");
  Var n = m.AddInteger(1, 7, "n");
  Var b = m.AddBinary("b");
  m.AddConstraint(2 * x + 3 * y <= 10, "cap");
  m.AddConstraint(x - y, -3, 2, "range");
  m.AddConstraint(n + b == 5, "eq");
  Var f = m.AddPiecewiseLinear(n, {1, 4, 7}, {0, 10, 12}, "tput");
  m.Maximize(3 * x + 2 * y + f + 5);
  const std::string lp = m.ToLpString();
  EXPECT_THAT(lp, HasSubstr("Maximize\n obj: 3 x + 2 y + tput\n"));
  EXPECT_THAT(lp, HasSubstr("Objective constant: 5"));
  EXPECT_THAT(lp, HasSubstr(" cap: 2 x + 3 y <= 10\n"));
  EXPECT_THAT(lp, HasSubstr(" range_lo: x - y >= -3\n"));
  EXPECT_THAT(lp, HasSubstr(" range_hi: x - y <= 2\n"));
  EXPECT_THAT(lp, HasSubstr(" eq: n + b = 5\n"));
  EXPECT_THAT(lp, HasSubstr(" tput_sum: tput_w0 + tput_w1 + tput_w2 = 1\n"));
  EXPECT_THAT(lp, HasSubstr(" tput_x: n - tput_w0 - 4 tput_w1 - 7 tput_w2 = 0\n"));
  EXPECT_THAT(lp, HasSubstr(" tput_y: tput - 10 tput_w1 - 12 tput_w2 = 0\n"));
  EXPECT_THAT(lp, HasSubstr(" -inf <= x <= 4\n"));
  EXPECT_THAT(lp, HasSubstr(" y free\n"));
  EXPECT_THAT(lp, HasSubstr(" 1 <= n <= 7\n"));
  EXPECT_THAT(lp, HasSubstr("Generals\n n\n"));
  EXPECT_THAT(lp, HasSubstr("Binaries\n b\n"));
  EXPECT_THAT(lp, HasSubstr("SOS\n tput_sos2: S2:: tput_w0:1 tput_w1:2 tput_w2:3\n"));
  EXPECT_THAT(lp, HasSubstr("End\n"));
}

TEST(MilpLpExport, SanitisesAndDeduplicatesNames) {
  Model m;
  Var a = m.AddContinuous(0, 1, "node count");
  Var b = m.AddContinuous(0, 1, "node_count");
  Var c = m.AddContinuous(0, 1, "2fast");
  Var d = m.AddContinuous(0, 1, "free");
  Var e = m.AddContinuous(0, 1, "e12");
  m.Minimize(a + b + c + d + e);
  const std::string lp = m.ToLpString();
  EXPECT_THAT(lp, HasSubstr("obj: node_count + node_count_1 + _2fast + _free + _e12\n"));
}

TEST(MilpLpExport, WriteLpWritesTheSameTextAndReportsBadPaths) {
  Model m;
  Var x = m.AddContinuous(0, 1, "x");
  m.Maximize(x);
  const std::string path = ::testing::TempDir() + "/bft_milp_export.lp";
  m.WriteLp(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), m.ToLpString());
  std::remove(path.c_str());
  EXPECT_THROW(m.WriteLp("/nonexistent-dir/x.lp"), Error);
}

}  // namespace
}  // namespace bft::milp
