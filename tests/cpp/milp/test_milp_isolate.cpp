// Isolated solves (SolveOptions::isolate) and interrupts (SolveOptions::interrupt): a backend that
// crashes or hangs in a child process comes back as a Result, and a solve can be stopped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bft/milp.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

using ::testing::HasSubstr;

bool Registered(const std::string& name) {
  const auto names = RegisteredBackends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A backend whose solve does `what` inside the shared solve frame, as a real backend would.
class MisbehavingBackend final : public Backend {
 public:
  enum class What { kSegfault, kAbort, kHang };
  explicit MisbehavingBackend(What what) : what_(what) {}
  std::string name() const override { return "misbehaving"; }
  Result Solve(const Model& model, const SolveOptions& options) const override {
    return internal::SolveFrame(name(), model, options,
                                [&](const SolveOptions&, const internal::Stopwatch&, Result*) {
                                  switch (what_) {
                                    case What::kSegfault:
                                      std::raise(SIGSEGV);
                                      break;
                                    case What::kAbort:
                                      std::abort();
                                    case What::kHang:
                                      while (true) std::this_thread::sleep_for(std::chrono::milliseconds(10));
                                  }
                                });
  }

 private:
  What what_;
};

Model Small() {
  Model m("small");
  Var x = m.AddInteger(0, 3, "x");
  m.Maximize(LinExpr(x));
  return m;
}

TEST(MilpIsolate, ACrashingBackendIsAnErrorResultNotADeadCaller) {
  SolveOptions options;
  options.isolate = true;
  const Model m = Small();
  const Result segv = MisbehavingBackend(MisbehavingBackend::What::kSegfault).Solve(m, options);
  EXPECT_EQ(segv.termination, Termination::kError);
  EXPECT_FALSE(segv.has_solution);
  // "crashed in its isolated child process (signal 11, ...)"; under AddressSanitizer the child
  // reports the SEGV and exits instead: "ended its isolated child process without a complete result".
  EXPECT_THAT(segv.message, HasSubstr("its isolated child process"));
  EXPECT_EQ(segv.backend, "misbehaving");
  EXPECT_EQ(segv.model_id, m.id());
  const Result abort = MisbehavingBackend(MisbehavingBackend::What::kAbort).Solve(m, options);
  EXPECT_EQ(abort.termination, Termination::kError);
  EXPECT_THAT(abort.message, HasSubstr("its isolated child process"));
}

TEST(MilpIsolate, AHangingBackendIsKilledPastItsTimeLimit) {
  SolveOptions options;
  options.isolate = true;
  options.time_limit_s = 0.1;
  const Result r = MisbehavingBackend(MisbehavingBackend::What::kHang).Solve(Small(), options);
  EXPECT_EQ(r.termination, Termination::kTimeLimit);
  EXPECT_FALSE(r.has_solution);
  EXPECT_THAT(r.message, HasSubstr("outlived its time limit"));
}

TEST(MilpIsolate, InterruptStopsAnIsolatedSolveOfAnyBackend) {
  std::atomic<int> polls{0};
  SolveOptions options;
  options.isolate = true;
  options.interrupt = [&polls] { return ++polls >= 3; };  // after a few polls of the waiting parent
  const Result r = MisbehavingBackend(MisbehavingBackend::What::kHang).Solve(Small(), options);
  EXPECT_EQ(r.termination, Termination::kInterrupted);
  EXPECT_EQ(polls.load(), 3);
  EXPECT_FALSE(r.has_solution);
}

// A market split instance (Cornuejols & Dawande): branch and bound cannot close it in seconds.
Model MarketSplit(int rows, int cols, unsigned seed) {
  std::srand(seed);
  Model m("market_split");
  std::vector<Var> x;
  for (int j = 0; j < cols; ++j) x.push_back(m.AddBinary("x" + std::to_string(j)));
  LinExpr slack_total;
  for (int i = 0; i < rows; ++i) {
    LinExpr row;
    int sum = 0;
    for (int j = 0; j < cols; ++j) {
      const int a = std::rand() % 100;
      row += a * LinExpr(x[static_cast<std::size_t>(j)]);
      sum += a;
    }
    Var plus = m.AddContinuous(0, kInf);
    Var minus = m.AddContinuous(0, kInf);
    m.AddConstraint(row + plus - minus == sum / 2);
    slack_total += plus + minus;
  }
  m.Minimize(slack_total);
  return m;
}

TEST(MilpIsolate, GlpkInProcessStopsWhenInterruptIsRequested) {
  if (!Registered("glpk")) GTEST_SKIP() << "GLPK was not built";
  SolveOptions options;
  options.interrupt = [] { return true; };
  const Result r = Solve(MarketSplit(6, 50, 5), "glpk", options);
  EXPECT_EQ(r.termination, Termination::kInterrupted) << r.message;
}

class MilpIsolateBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!Registered(GetParam())) GTEST_SKIP() << "MILP backend '" << GetParam() << "' was not built";
  }
};

TEST_P(MilpIsolateBackend, IsolatedSolvesGiveTheSameResultsAsInProcess) {
  for (int seed = 0; seed < 8; ++seed) {
    Model m("knapsack");
    std::srand(static_cast<unsigned>(seed));
    std::vector<Var> x;
    LinExpr weight, value;
    for (int i = 0; i < 12; ++i) {
      x.push_back(m.AddInteger(0, 3));
      weight += (1 + std::rand() % 9) * LinExpr(x.back());
      value += (std::rand() % 10) * LinExpr(x.back());
    }
    m.AddConstraint(weight <= 30, "capacity");
    value += LinExpr(m.AddPiecewiseLinear(x[0], {0, 1, 2, 3}, {0, 7, 1, 9}));
    m.Maximize(value);
    SolveOptions options;
    const Result direct = Solve(m, GetParam(), options);
    options.isolate = true;
    const Result isolated = Solve(m, GetParam(), options);
    ASSERT_TRUE(direct.optimal()) << direct.message;
    EXPECT_EQ(isolated.termination, direct.termination) << isolated.message;
    EXPECT_EQ(isolated.message, direct.message);
    EXPECT_EQ(isolated.backend, GetParam());
    EXPECT_EQ(isolated.model_id, m.id());
    EXPECT_DOUBLE_EQ(isolated.objective, direct.objective);
    EXPECT_EQ(isolated.values, direct.values);
  }
}

TEST_P(MilpIsolateBackend, IsolatedInfeasibleAndInvalidOptionsBehaveAsInProcess) {
  Model m("infeasible");
  Var x = m.AddInteger(0, 3, "x");
  m.AddConstraint(2 * LinExpr(x) == 3, "odd");
  SolveOptions options;
  options.isolate = true;
  EXPECT_EQ(Solve(m, GetParam(), options).termination, Termination::kInfeasible);
  options.relative_gap = -1;  // checked before the fork: an exception in the caller, as in process
  EXPECT_THROW(Solve(m, GetParam(), options), InvalidArgument);
}

TEST_P(MilpIsolateBackend, InterruptStopsAnIsolatedHardSolve) {
  std::atomic<int> polls{0};
  SolveOptions options;
  options.isolate = true;
  options.interrupt = [&polls] { return ++polls >= 2; };
  const Result r = Solve(MarketSplit(6, 50, 5), GetParam(), options);
  EXPECT_EQ(r.termination, Termination::kInterrupted) << r.message;
}

INSTANTIATE_TEST_SUITE_P(Backends, MilpIsolateBackend, ::testing::Values("glpk", "cbc"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace bft::milp
