// Model fitting: recovery of known curves from noisy samples, statuses, selection, extrapolation,
// and clear errors on bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "bft/curve.h"

namespace bft::curve {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Samples of `truth` at the given sizes, with multiplicative Gaussian noise of relative sd `noise`,
// `repeats` samples per size.
std::vector<Sample> Noisy(const std::function<double(double)>& truth, const std::vector<double>& sizes,
                          double noise, int repeats, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> eps(0.0, noise);
  std::vector<Sample> out;
  for (double n : sizes)
    for (int r = 0; r < repeats; ++r) out.push_back({n, truth(n) * (1.0 + eps(rng)), 1.0});
  return out;
}

double MaxRelError(const FitResult& fit, const std::function<double(double)>& truth, int max_n) {
  double worst = 0.0;
  for (int n = 1; n <= max_n; ++n) worst = std::max(worst, std::abs(fit.Predict(n) / truth(n) - 1.0));
  return worst;
}

const std::vector<double> kSizes = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};

struct Case {
  Model model;
  std::function<double(double)> truth;
};

std::vector<Case> Cases() {
  return {
      {Model::kAmdahl, [](double n) { return 1.0 / (2e-5 + 1e-3 / n); }},
      {Model::kOptimus, [](double n) { return 1.0 / (5e-6 + 1e-3 / n + 4e-5 * std::log2(n) / n); }},
      {Model::kCommLog, [](double n) { return 1.0 / (1e-5 + 1e-3 / n + 2e-5 * std::log2(n)); }},
      {Model::kUsl, [](double n) { return 1000.0 * n / (1.0 + 0.02 * (n - 1.0) + 4e-4 * n * (n - 1.0)); }},
  };
}

TEST(CurveFit, EveryModelRecoversItsOwnCurveFromNoisySamples) {
  for (const Case& c : Cases()) {
    for (unsigned seed = 1; seed <= 5; ++seed) {
      FitOptions opt;
      opt.model = c.model;
      const FitResult fit = Fit(Noisy(c.truth, kSizes, 0.03, 3, seed), opt);
      ASSERT_TRUE(fit.ok()) << ToString(c.model) << ": " << fit.message;
      EXPECT_EQ(fit.model(), c.model);
      EXPECT_LT(MaxRelError(fit, c.truth, 64), 0.04) << ToString(c.model) << " seed " << seed;
    }
  }
}

TEST(CurveFit, ExactSamplesGiveExactParameters) {
  FitOptions opt;
  opt.model = Model::kAmdahl;
  const FitResult a = Fit(Noisy(Cases()[0].truth, kSizes, 0.0, 1, 1), opt);
  ASSERT_TRUE(a.ok());
  EXPECT_NEAR(a.best.params[0], 2e-5, 1e-12);
  EXPECT_NEAR(a.best.params[1], 1e-3, 1e-10);
  opt.model = Model::kUsl;
  const FitResult u = Fit(Noisy(Cases()[3].truth, kSizes, 0.0, 1, 1), opt);
  ASSERT_TRUE(u.ok()) << u.message;
  EXPECT_NEAR(u.best.params[0], 1000.0, 1e-3);
  EXPECT_NEAR(u.best.params[1], 0.02, 1e-6);
  EXPECT_NEAR(u.best.params[2], 4e-4, 1e-8);
}

TEST(CurveFit, AutomaticChoiceFollowsACurveThatTurnsDown) {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    for (Selection sel : {Selection::kLeaveOneOut, Selection::kAicc}) {
      FitOptions opt;
      opt.selection = sel;
      const auto truth = Cases()[3].truth;  // USL, peaks near 49 nodes
      const FitResult fit = Fit(Noisy(truth, kSizes, 0.02, 2, seed), opt);
      ASSERT_TRUE(fit.ok());
      EXPECT_NE(fit.model(), Model::kAmdahl) << "Amdahl cannot turn down";
      EXPECT_LT(MaxRelError(fit, truth, 64), 0.05) << ToString(sel) << " chose " << ToString(fit.model());
      // The plain Amdahl fit of the same samples is worse: the choice matters.
      opt.model = Model::kAmdahl;
      EXPECT_GT(MaxRelError(Fit(Noisy(truth, kSizes, 0.02, 2, seed), opt), truth, 64), 0.1);
    }
  }
}

TEST(CurveFit, CandidatesReportEveryModelAndLeaveOneOutScores) {
  const FitResult fit = Fit(Noisy(Cases()[1].truth, kSizes, 0.01, 1, 7));
  ASSERT_EQ(fit.candidates.size(), static_cast<std::size_t>(kNumModels));
  for (int i = 0; i < kNumModels; ++i) {
    EXPECT_EQ(fit.candidates[i].model, kAllModels[i]);
    EXPECT_EQ(fit.candidates[i].status, FitStatus::kOk);
    EXPECT_GE(fit.candidates[i].loo_rel_error, 0.0);
  }
  double best = std::numeric_limits<double>::infinity();
  for (const ModelFit& m : fit.candidates) best = std::min(best, m.loo_rel_error);
  EXPECT_EQ(fit.best.loo_rel_error, best);
}

TEST(CurveFit, SinglePointIsInsufficientDataNotParameters) {
  const FitResult fit = Fit({{4.0, 100.0, 1.0}});
  EXPECT_EQ(fit.status, FitStatus::kInsufficientData);
  EXPECT_FALSE(fit.ok());
  EXPECT_NE(fit.message.find("one distinct node count"), std::string::npos) << fit.message;
  EXPECT_THROW(fit.Predict(4.0), Error);
  EXPECT_THROW(fit.ToCurve(8), Error);
}

TEST(CurveFit, RepeatedSamplesAtOneSizeAreStillOnePoint) {
  const FitResult fit = Fit({{4.0, 100.0, 1.0}, {4.0, 101.0, 1.0}, {4.0, 99.0, 2.0}});
  EXPECT_EQ(fit.status, FitStatus::kInsufficientData);
  EXPECT_EQ(fit.num_sizes, 1);
}

TEST(CurveFit, TwoSizesFitAmdahlButNotThreeParameterModels) {
  const std::vector<Sample> s = {{1, 100, 1}, {4, 350, 1}};
  const FitResult autofit = Fit(s);
  ASSERT_TRUE(autofit.ok());
  EXPECT_EQ(autofit.model(), Model::kAmdahl);
  EXPECT_NEAR(autofit.Predict(1), 100.0, 1e-9);
  EXPECT_NEAR(autofit.Predict(4), 350.0, 1e-9);
  FitOptions opt;
  opt.model = Model::kOptimus;
  const FitResult forced = Fit(s, opt);
  EXPECT_EQ(forced.status, FitStatus::kInsufficientData);
  EXPECT_NE(forced.message.find("at least 3"), std::string::npos) << forced.message;
}

TEST(CurveFit, NearlyEqualSizesAreIllConditioned) {
  const FitResult fit = Fit({{1.0, 100.0, 1.0}, {1.0 + 1e-12, 100.0, 1.0}});
  EXPECT_EQ(fit.status, FitStatus::kIllConditioned);
  EXPECT_FALSE(fit.message.empty());
}

TEST(CurveFit, IterationLimitGivesNotConverged) {
  FitOptions opt;
  opt.model = Model::kUsl;
  opt.max_iterations = 1;
  const FitResult fit = Fit(Noisy(Cases()[3].truth, kSizes, 0.05, 1, 3), opt);
  EXPECT_EQ(fit.status, FitStatus::kNotConverged);
  EXPECT_NE(fit.message.find("did not converge"), std::string::npos);
  EXPECT_EQ(fit.best.Predict(8.0), 0.0);
}

TEST(CurveFit, ConflictingDuplicatesAreRejectedAgreeingOnesMerged) {
  try {
    Fit({{1, 100, 1}, {4, 300, 1}, {4, 900, 1}});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("4 nodes conflict"), std::string::npos) << e.what();
  }
  const FitResult fit = Fit({{1, 100, 1}, {4, 300, 1}, {4, 320, 1}, {2, 180, 1}});
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit.num_sizes, 3);
}

TEST(CurveFit, BadInputsThrowNamingTheSample) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message([] { Fit(std::vector<Sample>{}); }).find("no samples"), std::string::npos);
  EXPECT_NE(message([] {
              Fit({{1, 10, 1}, {-2, 10, 1}});
            }).find("sample 1: node count -2"),
            std::string::npos);
  EXPECT_NE(message([] {
              Fit({{1, 10, 1}, {2, kNaN, 1}});
            }).find("sample 1: samples_per_s nan"),
            std::string::npos);
  EXPECT_NE(message([] { Fit({{kNaN, 10, 1}}); }).find("sample 0"), std::string::npos);
  EXPECT_NE(message([] { Fit({{1, -10, 1}}); }).find("samples_per_s -10"), std::string::npos);
  EXPECT_NE(message([] { Fit({{1, 10, 0}}); }).find("weight 0"), std::string::npos);
  EXPECT_NE(message([] {
              Fit(std::vector<double>{1, 2}, std::vector<double>{1});
            }).find("2 node counts but 1"),
            std::string::npos);
  FitOptions bad;
  bad.extrapolation_discount = 2.0;
  EXPECT_NE(message([&] {
              Fit({{1, 10, 1}, {2, 20, 1}}, bad);
            }).find("extrapolation_discount"),
            std::string::npos);
  EXPECT_THROW(ModelFromString("linear"), InvalidArgument);
  EXPECT_EQ(ModelFromString("comm_log"), Model::kCommLog);
}

TEST(CurveFit, ExtrapolationIsDiscountedAndCapped) {
  // Linear scaling measured up to 8 nodes.
  const FitResult fit = Fit({{1, 100, 1}, {2, 200, 1}, {4, 400, 1}, {8, 800, 1}});
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit.Evaluate(8), 800.0, 1e-6);
  EXPECT_NEAR(fit.Predict(16), 1600.0, 1e-3);
  // Half the predicted gain beyond 8 nodes, and no further gain beyond 2 * 8.
  EXPECT_NEAR(fit.Evaluate(16), 800.0 + 0.5 * 800.0, 1e-3);
  EXPECT_NEAR(fit.Evaluate(64), fit.Evaluate(16), 1e-9);
  EXPECT_LE(fit.Evaluate(12), fit.Predict(12));
  EXPECT_EQ(fit.Evaluate(0), 0.0);
  const ThroughputCurve c = fit.ToCurve(32);
  ASSERT_EQ(c.nodes().size(), 33u);
  EXPECT_NEAR(c.Evaluate(4), 400.0, 1e-6);
  EXPECT_NEAR(c.Evaluate(32), fit.Evaluate(16), 1e-9);
}

TEST(CurveFit, ExtrapolationKeepsAPredictedDecline) {
  FitOptions opt;
  opt.model = Model::kUsl;
  const auto truth = Cases()[3].truth;
  const FitResult fit = Fit(Noisy(truth, {1, 2, 4, 8, 16, 32, 48}, 0.0, 1, 1), opt);
  ASSERT_TRUE(fit.ok());
  // Beyond 48 the USL declines; the conservative curve follows the decline in full.
  EXPECT_NEAR(fit.Evaluate(64), fit.Predict(64), 1e-6);
  EXPECT_LT(fit.Evaluate(64), fit.Evaluate(48));
}

TEST(CurveFit, WeightsPullTheFitTowardHeavySamples) {
  // Inconsistent samples: the heavily weighted ones dominate.
  const std::vector<double> n = {1, 2, 4, 8}, x = {100, 190, 300, 700};
  FitOptions opt;
  opt.model = Model::kAmdahl;
  const FitResult light = Fit(n, x, {1, 1, 1, 1}, opt);
  const FitResult heavy = Fit(n, x, {1, 1, 1000, 1}, opt);
  ASSERT_TRUE(light.ok() && heavy.ok());
  EXPECT_LT(std::abs(heavy.Predict(4) / 300 - 1), std::abs(light.Predict(4) / 300 - 1));
}

}  // namespace
}  // namespace bft::curve
