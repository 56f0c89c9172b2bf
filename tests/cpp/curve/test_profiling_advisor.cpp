// The profiling advisor, driven by a simulated job that reports its progress with noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "bft/profiling.h"

namespace bft::curve {
namespace {

// A job whose steady rate on n nodes is truth(n) * scale; after every rescale it stalls for
// stall_s seconds (no progress). It reports every period_s seconds, each interval's rate carrying
// multiplicative noise.
struct SimJob {
  std::string id = "job";
  std::function<double(double)> truth;
  double scale = 1.0;
  double stall_s = 15.0;
  double period_s = 10.0;
  double noise = 0.03;
  double t = 0.0;
  double samples = 0.0;
  std::mt19937 rng{42};

  // Rescale to `nodes` now and run for duration_s.
  void Run(ProfilingAdvisor& adv, int nodes, double duration_s) {
    adv.Report(id, t, nodes, samples);
    std::normal_distribution<double> eps(0.0, noise);
    const double start = t;
    while (t < start + duration_s - 1e-9) {
      const double t1 = t + period_s;
      const double productive = std::max(0.0, t1 - std::max(t, start + stall_s));
      samples += truth(nodes) * scale * (1.0 + eps(rng)) * productive;
      t = t1;
      adv.Report(id, t, nodes, samples);
    }
  }
};

double Amdahlish(double n) { return 1.0 / (1e-4 + 1e-3 / n + 5e-5 * std::log2(n) / n); }

TEST(CurveAdvisor, UnknownJobGetsTheOptimisticPrior) {
  AdvisorOptions opt;
  opt.prior_samples_per_node_s = 50.0;
  ProfilingAdvisor adv(opt);
  const ThroughputCurve c = adv.ThroughputEstimate("new", 8);
  EXPECT_EQ(c.nodes(), (std::vector<int>{0, 1, 2, 3, 4, 6, 8}));
  EXPECT_DOUBLE_EQ(c.Evaluate(8), 400.0);
  EXPECT_DOUBLE_EQ(adv.RelativeUncertainty("new", 4), 1.0);
  EXPECT_GT(adv.ObjectiveCurve("new", 8).Evaluate(8), 400.0);
  adv.SetPrior("new", 10.0);
  EXPECT_DOUBLE_EQ(adv.ThroughputEstimate("new", 8).Evaluate(4), 40.0);
  EXPECT_TRUE(adv.Profile("new").has_prior);
}

TEST(CurveAdvisor, NoisyJobConvergesToItsTrueCurve) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = Amdahlish;
  for (int n : {1, 2, 4, 8, 16, 32}) job.Run(adv, n, 600.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.sizes.size(), 6u);
  ASSERT_TRUE(p.fit.ok()) << p.fit.message;
  const ThroughputCurve est = adv.ThroughputEstimate("job", 64);
  for (int n = 1; n <= 32; ++n) EXPECT_NEAR(est.Evaluate(n) / Amdahlish(n), 1.0, 0.03) << n << " nodes";
  for (const SizeEstimate& s : p.sizes) {
    EXPECT_NEAR(s.samples_per_s / Amdahlish(s.nodes), 1.0, 0.03) << s.nodes;
    EXPECT_GT(s.rel_sd, 0.0);
    EXPECT_LT(s.rel_sd, 0.05);
  }
  // Beyond the largest visited size the estimate is the fitted model's, which found the truth.
  EXPECT_NEAR(est.Evaluate(64) / Amdahlish(64), 1.0, 0.03);
}

// The advisor's curve counts the model's predicted gain in full up to 8x the largest measured size
// (AdvisorFitOptions): with FitOptions' conservative rule (half the gain, none beyond 2x) a job
// measured at small sizes looked not worth growing, and the learned replay left nodes idle.
TEST(CurveAdvisor, GrowthBeyondTheMeasuredSizesIsValuedAsTheModelPredicts) {
  SimJob job;
  job.truth = Amdahlish;
  job.noise = 0.0;
  ProfilingAdvisor adv;
  for (int n : {1, 2, 4}) job.Run(adv, n, 600.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_TRUE(p.fit.ok()) << p.fit.message;
  const ThroughputCurve est = adv.ThroughputEstimate("job", 256);
  for (int n : {8, 16, 32}) {
    EXPECT_NEAR(est.Evaluate(n), p.fit.Predict(n), 1e-9 * p.fit.Predict(n)) << n << " nodes";
    EXPECT_GT(est.Evaluate(n), est.Evaluate(n / 2)) << n << " nodes";
  }
  // No further gain beyond 8 x 4 nodes.
  EXPECT_NEAR(est.Evaluate(256), p.fit.Predict(32), 1e-9 * p.fit.Predict(32));

  // The same reports under FitOptions' rule: growing from 4 to 8 nodes is worth half as much, and
  // nothing beyond.
  AdvisorOptions conservative;
  conservative.fit = FitOptions();
  ProfilingAdvisor old(conservative);
  SimJob again;
  again.truth = Amdahlish;
  again.noise = 0.0;
  for (int n : {1, 2, 4}) again.Run(old, n, 600.0);
  const ThroughputCurve before = old.ThroughputEstimate("job", 256);
  const FitResult& f = old.Profile("job").fit;
  EXPECT_NEAR(before.Evaluate(8), f.Predict(4) + 0.5 * (f.Predict(8) - f.Predict(4)), 1e-9 * f.Predict(8));
  EXPECT_LT(before.Evaluate(8), est.Evaluate(8));
  EXPECT_DOUBLE_EQ(before.Evaluate(256), before.Evaluate(8));
}

TEST(CurveAdvisor, CurvesHaveSparseBreakpointsWhateverThePoolSize) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = Amdahlish;
  for (int n : {1, 2, 5, 8, 13}) job.Run(adv, n, 600.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_TRUE(p.fit.ok()) << p.fit.message;
  const AdvisorCurves small = adv.Curves("job", 64);
  for (int max_nodes : {64, 4734, 1000000000}) {
    const AdvisorCurves c = adv.Curves("job", max_nodes);
    const std::vector<int>& nodes = c.throughput.nodes();
    // O(log max_nodes) breakpoints: the grid, the 5 measured sizes, the extrapolation cap (13 x 8).
    EXPECT_LE(nodes.size(), 2 * std::log2(max_nodes) + 10) << max_nodes;
    EXPECT_EQ(c.objective.nodes(), nodes);
    EXPECT_EQ(nodes.back(), max_nodes);
    for (int m : {1, 2, 5, 8, 13, 104}) {
      if (m <= max_nodes) {
        EXPECT_TRUE(std::find(nodes.begin(), nodes.end(), m) != nodes.end()) << m << " nodes";
      }
    }
    // The value at a breakpoint does not depend on max_nodes (it is the estimate at that size),
    // and beyond the measured sizes it is the fitted curve with the extrapolation rule.
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      const int n = nodes[k];
      if (n <= 64) {
        EXPECT_EQ(c.throughput.values()[k], small.throughput.Evaluate(n)) << n;
        EXPECT_EQ(c.objective.values()[k], small.objective.Evaluate(n)) << n;
      }
      if (n > 13) {
        EXPECT_DOUBLE_EQ(c.throughput.values()[k], p.fit.Evaluate(n)) << n;
      }
      if (n >= 1) {
        EXPECT_DOUBLE_EQ(c.objective.values()[k],
                         c.throughput.values()[k] *
                             (1.0 + adv.options().exploration_bonus * adv.RelativeUncertainty("job", n)))
            << n;
      }
    }
    // The separate calls return the same curves.
    EXPECT_EQ(adv.ThroughputEstimate("job", max_nodes).values(), c.throughput.values());
    EXPECT_EQ(adv.ObjectiveCurve("job", max_nodes).values(), c.objective.values());
  }
}

TEST(CurveAdvisor, WarmupIsDiscardedAndRescaleOverheadMeasured) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = [](double n) { return 100.0 * n; };
  job.noise = 0.0;
  job.stall_s = 15.0;
  job.Run(adv, 4, 300.0);
  job.Run(adv, 8, 300.0);
  job.Run(adv, 2, 300.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.sizes.size(), 3u);
  for (const SizeEstimate& s : p.sizes) EXPECT_NEAR(s.samples_per_s, 100.0 * s.nodes, 1e-6) << s.nodes;
  ASSERT_EQ(p.rescales.size(), 3u);  // the start and two rescales
  for (const RescaleOverhead& r : p.rescales) {
    EXPECT_NEAR(r.overhead_s, 15.0, 1e-6);
    EXPECT_NEAR(r.lost_samples, 15.0 * 100.0 * r.to_nodes, 1e-6);
  }
  EXPECT_EQ(p.rescales[1].from_nodes, 4);
  EXPECT_EQ(p.rescales[1].to_nodes, 8);
  // In the allocator's units (seconds at the rate before the rescale, which is what it charges):
  // 4 -> 8 lost 15 s x 800/s = 12,000 samples = 30 s at 400/s; 8 -> 2 lost 15 s x 200/s = 3,000
  // samples = 3.75 s at 800/s. (Before, both were 15 s: shrinking overstated, growing understated.)
  EXPECT_NEAR(p.MethodCosts(RescaleMethod::kRelaunch).mean_scale_up_s, 30.0, 1e-6);
  EXPECT_NEAR(p.MethodCosts(RescaleMethod::kRelaunch).mean_scale_down_s, 3.75, 1e-6);
  double up = 5.0, down = 5.0;
  MeasuredRescaleCosts(p, &up, &down);
  EXPECT_NEAR(up, 30.0, 1e-6);
  EXPECT_NEAR(down, 3.75, 1e-6);
}

TEST(CurveAdvisor, MeasuredCostTimesOldRateIsTheLossInSamples) {
  // Whatever the sizes, what the allocator would charge for the measured rescale (scale_*_s x the
  // rate at the old size) is the samples the job really lost.
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{1, 16}, {16, 1}, {3, 5}, {12, 2}}) {
    ProfilingAdvisor adv;
    SimJob job;
    job.truth = Amdahlish;
    job.noise = 0.0;
    job.stall_s = 20.0;
    job.Run(adv, from, 400.0);
    job.Run(adv, to, 400.0);
    const JobProfile p = adv.Profile("job");
    const RescaleCosts& c = p.MethodCosts(RescaleMethod::kRelaunch);
    const double charged = (to > from ? c.mean_scale_up_s : c.mean_scale_down_s) *
                           adv.ThroughputEstimate("job", 16).Evaluate(from);
    EXPECT_NEAR(charged, 20.0 * Amdahlish(to), 1e-6 * Amdahlish(to)) << from << " -> " << to;
  }
}

TEST(CurveAdvisor, StallLongerThanTheWarmupStillCountsAsWarmup) {
  // A stall of 95 s after each rescale (30 s of warm-up by default): intervals without progress,
  // and the one in which progress resumes, are warm-up; counting them as steady understated the
  // rate at the new size and the overhead both.
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = [](double n) { return 100.0 * n; };
  job.noise = 0.0;
  job.stall_s = 95.0;
  job.Run(adv, 4, 400.0);
  job.Run(adv, 8, 400.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.sizes.size(), 2u);
  for (const SizeEstimate& s : p.sizes) EXPECT_NEAR(s.samples_per_s, 100.0 * s.nodes, 1e-6) << s.nodes;
  ASSERT_EQ(p.rescales.size(), 2u);
  EXPECT_NEAR(p.rescales[1].overhead_s, 95.0, 1e-6);
  EXPECT_NEAR(p.MethodCosts(RescaleMethod::kRelaunch).mean_scale_up_s, 95.0 * 800.0 / 400.0, 1e-6);
}

TEST(CurveAdvisor, RescaleBeforeThePreviousOneWarmedUpIsNotMeasured) {
  // A preemption and a regrowth at the same moment (4 -> 2 -> 8), and a rescale inside the
  // previous one's warm-up (8 -> 16 after 10 s): each stall mixes two losses, which credited to
  // the last rescale overstated its cost (a grow charged with the preemption's loss too).
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = [](double n) { return 100.0 * n; };
  job.noise = 0.0;
  job.stall_s = 15.0;
  job.Run(adv, 4, 300.0);
  adv.Report("job", job.t, 2, job.samples);
  job.Run(adv, 8, 10.0);
  job.Run(adv, 16, 300.0);
  JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.rescales.size(), 1u);  // only the start
  EXPECT_EQ(p.rescales[0].from_nodes, 0);
  double up = 17.0, down = 11.0;
  MeasuredRescaleCosts(p, &up, &down);
  EXPECT_EQ(up, 17.0);
  EXPECT_EQ(down, 11.0);
  // Once warmed up, the next rescale is measured again.
  job.Run(adv, 4, 300.0);
  p = adv.Profile("job");
  ASSERT_EQ(p.rescales.size(), 2u);
  EXPECT_EQ(p.rescales[1].from_nodes, 16);
  EXPECT_NEAR(p.rescales[1].lost_samples, 15.0 * 400.0, 1e-6);
}

double AmdahlCurve(double n) { return 1.0 / (1e-4 + 1e-3 / n); }

// A noiseless job `id` of model "m", declared to the advisor, whose rate is truth(n) * scale.
SimJob ModelJob(ProfilingAdvisor& adv, const std::string& id, std::function<double(double)> truth,
                double scale = 1.0) {
  SimJob job;
  job.id = id;
  job.truth = std::move(truth);
  job.scale = scale;
  job.noise = 0.0;
  adv.SetModel(id, "m");
  return job;
}

TEST(CurveAdvisor, ANewJobOfAKnownModelStartsFromItsSiblingsCurve) {
  // A sibling of model "m" measured 2, 8 and 32 nodes, then finished (forgotten): a new job of
  // that model is estimated by the curve through them from its first report on, not by the
  // linear prior; a job of another model still gets the prior.
  ProfilingAdvisor adv;
  SimJob sibling = ModelJob(adv, "sibling", AmdahlCurve);
  sibling.Run(adv, 2, 300.0);
  sibling.Run(adv, 8, 300.0);
  sibling.Run(adv, 32, 300.0);
  adv.Forget("sibling");
  adv.SetModel("new", "m");
  adv.SetModel("other", "n");
  EXPECT_EQ(adv.Profile("new").model, "m");
  const ThroughputCurve fresh = adv.ThroughputEstimate("new", 64);
  for (const int n : {2, 4, 8, 16, 32})
    EXPECT_NEAR(fresh.Evaluate(n), AmdahlCurve(n), 1e-6 * AmdahlCurve(n)) << n;
  EXPECT_LT(adv.RelativeUncertainty("new", 8), 0.5);
  EXPECT_DOUBLE_EQ(adv.ThroughputEstimate("other", 64).Evaluate(8), 8 * 1000.0);
}

TEST(CurveAdvisor, AJobsOwnReportsKeepItsModelPriorHonest) {
  ProfilingAdvisor adv;
  SimJob sibling = ModelJob(adv, "sibling", AmdahlCurve);
  sibling.Run(adv, 2, 300.0);
  sibling.Run(adv, 8, 300.0);
  sibling.Run(adv, 32, 300.0);
  // Twice as fast as its sibling at every size: one own size scales the model's curve.
  SimJob fast = ModelJob(adv, "fast", AmdahlCurve, 2.0);
  fast.Run(adv, 4, 300.0);
  EXPECT_NEAR(adv.ThroughputEstimate("fast", 64).Evaluate(16), 2.0 * AmdahlCurve(16), 1e-6 * AmdahlCurve(16));
  // Linear scaling, unlike its model: two own sizes that disagree with the model's shape by more
  // than fit.duplicate_tolerance drop the prior: its own fit, linear beyond 8 nodes too (the
  // advisor's extrapolation counts the predicted gain in full: 80,000 at 16).
  SimJob linear = ModelJob(adv, "linear", [](double n) { return 5000.0 * n; });
  linear.Run(adv, 2, 300.0);
  linear.Run(adv, 8, 300.0);
  EXPECT_NEAR(adv.ThroughputEstimate("linear", 64).Evaluate(8), 40000.0, 1e-6 * 40000.0);
  EXPECT_NEAR(adv.ThroughputEstimate("linear", 64).Evaluate(16), 80000.0, 1e-6 * 80000.0);
}

TEST(CurveAdvisor, TheModelCurveIsAnchoredToItsSiblingsMeasurements) {
  // A workload curve outside the model family (a bump at 4 nodes, like AlexNet's on Summit): the
  // model's fit misses it by several percent, but the model's curve passes through every rate a
  // sibling measured, and in between lies between them (no jump next to a measured size).
  const std::vector<std::pair<int, double>> points = {{1, 1000.0}, {2, 1900.0},  {4, 3900.0},
                                                      {8, 6500.0}, {16, 9000.0}, {32, 10500.0}};
  std::vector<int> nodes;
  std::vector<double> rates;
  for (const auto& [n, rate] : points) {
    nodes.push_back(n);
    rates.push_back(rate);
  }
  const ThroughputCurve truth(nodes, rates);  // piecewise linear through the points
  ProfilingAdvisor adv;
  SimJob sibling = ModelJob(adv, "sibling", truth);
  for (const auto& [n, rate] : points) sibling.Run(adv, n, 300.0);
  adv.Forget("sibling");
  adv.SetModel("new", "m");
  const ThroughputCurve fresh = adv.ThroughputEstimate("new", 64);
  for (const auto& [n, rate] : points) EXPECT_NEAR(fresh.Evaluate(n), rate, 1e-6 * rate) << n;
  for (int n = 1; n < 32; ++n) {
    const auto hi = std::find_if(points.begin(), points.end(), [n](const auto& p) { return p.first > n; });
    EXPECT_GE(fresh.Evaluate(n), std::prev(hi)->second * (1.0 - 1e-9)) << n;
    EXPECT_LE(fresh.Evaluate(n), hi->second * (1.0 + 1e-9)) << n;
  }
  // A job 1.5 times as fast, measured at 2 and 8 nodes: at 4 it is its sibling's 4 times 1.5.
  SimJob fast = ModelJob(adv, "fast", truth, 1.5);
  fast.Run(adv, 2, 300.0);
  fast.Run(adv, 8, 300.0);
  const ThroughputCurve own = adv.ThroughputEstimate("fast", 64);
  for (const int n : {1, 2, 4, 8, 16}) EXPECT_NEAR(own.Evaluate(n), 1.5 * truth(n), 1e-6 * truth(n)) << n;
}

TEST(CurveAdvisor, DriftAgesOutTheOldRate) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = Amdahlish;
  job.Run(adv, 8, 3000.0);
  job.scale = 0.6;  // the job slows down by 40% (e.g. a new phase of training)
  job.Run(adv, 8, 300.0);
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.sizes.size(), 1u);
  EXPECT_NEAR(p.sizes[0].samples_per_s / (0.6 * Amdahlish(8)), 1.0, 0.03);
}

TEST(CurveAdvisor, HalfLifeAgesOutOldDataWithoutDriftDetection) {
  AdvisorOptions opt;
  opt.drift_threshold = 10.0;  // never detects drift
  opt.half_life_s = 60.0;
  ProfilingAdvisor adv(opt);
  SimJob job;
  job.truth = [](double n) { return 100.0 * n; };
  job.noise = 0.0;
  job.Run(adv, 4, 3000.0);
  job.scale = 0.5;
  job.Run(adv, 4, 600.0);
  EXPECT_NEAR(adv.Profile("job").sizes[0].samples_per_s, 200.0, 2.0);
}

TEST(CurveAdvisor, ExplorationBonusAndProbesFavourUnmeasuredSizes) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = Amdahlish;
  job.Run(adv, 2, 600.0);
  job.Run(adv, 4, 600.0);
  const ThroughputCurve est = adv.ThroughputEstimate("job", 32);
  const ThroughputCurve obj = adv.ObjectiveCurve("job", 32);
  const double bonus_measured = obj.Evaluate(4) / est.Evaluate(4) - 1.0;
  const double bonus_far = obj.Evaluate(32) / est.Evaluate(32) - 1.0;
  EXPECT_GT(bonus_far, bonus_measured);
  EXPECT_LT(bonus_measured, 0.05);
  const auto probes = adv.ProbeSuggestions("job", 32, 3);
  ASSERT_EQ(probes.size(), 3u);
  for (std::size_t i = 0; i < probes.size(); ++i) {
    EXPECT_NE(probes[i].nodes, 2);
    EXPECT_NE(probes[i].nodes, 4);
    if (i > 0) {
      EXPECT_GE(probes[i - 1].score, probes[i].score);
    }
  }
}

TEST(CurveAdvisor, SpeedupIsTheObjectiveOverTheJobsOwnOneNodeEstimate) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = Amdahlish;
  job.Run(adv, 2, 600.0);
  job.Run(adv, 8, 600.0);
  const AdvisorCurves rate = adv.Curves("job", 32);
  const AdvisorCurves speedup = adv.Curves("job", 32, Objective::kSpeedup);
  // Same throughput and breakpoints; the objective in units of the estimate at 1 node, which was
  // never measured (learned like the rest of the curve, not given).
  EXPECT_EQ(speedup.throughput.values(), rate.throughput.values());
  ASSERT_EQ(speedup.objective.nodes(), rate.objective.nodes());
  const double one = rate.throughput.Evaluate(1);
  for (std::size_t k = 0; k < rate.objective.values().size(); ++k)
    EXPECT_DOUBLE_EQ(speedup.objective.values()[k], rate.objective.values()[k] / one);
  EXPECT_EQ(adv.ObjectiveCurve("job", 32, Objective::kSpeedup).values(), speedup.objective.values());
  EXPECT_EQ(ObjectiveFromString(ToString(Objective::kSpeedup)), Objective::kSpeedup);
  EXPECT_THROW(ObjectiveFromString("speed"), InvalidArgument);
}

TEST(CurveAdvisor, SaveLoadRoundTrips) {
  ProfilingAdvisor adv;
  SimJob a;
  a.truth = Amdahlish;
  a.Run(adv, 1, 300.0);
  a.Run(adv, 4, 300.0);
  a.Run(adv, 8, 300.0);
  SimJob b;
  b.id = "job with spaces %/\n";
  b.truth = [](double n) { return 10.0 * n; };
  b.Run(adv, 2, 200.0);
  adv.SetPrior("prior-only", 7.5);
  adv.SetModel("job", "model with spaces");
  adv.SetModel("new of model", "model with spaces");
  const std::string state = adv.Save();
  const ProfilingAdvisor back = ProfilingAdvisor::Load(state);
  EXPECT_EQ(back.Save(), state);
  EXPECT_EQ(back.Jobs(), adv.Jobs());
  for (const std::string& id : adv.Jobs()) {
    EXPECT_EQ(back.ThroughputEstimate(id, 16).values(), adv.ThroughputEstimate(id, 16).values()) << id;
    EXPECT_EQ(back.ObjectiveCurve(id, 16).values(), adv.ObjectiveCurve(id, 16).values()) << id;
  }
  // The restored advisor continues where the saved one stopped.
  ProfilingAdvisor cont = ProfilingAdvisor::Load(state);
  SimJob a2 = a;
  a.Run(adv, 8, 100.0);
  a2.Run(cont, 8, 100.0);
  EXPECT_EQ(cont.Save(), adv.Save());
}

TEST(CurveAdvisor, LoadsVersion1To3States) {
  ProfilingAdvisor adv;
  SimJob job;
  job.truth = [](double n) { return 100.0 * n; };
  job.noise = 0.0;
  job.Run(adv, 4, 300.0);
  job.Run(adv, 8, 300.0);
  std::string state = adv.Save();
  auto drop_last_fields = [](const std::string& line, int count) {
    std::string out = line;
    for (int k = 0; k < count; ++k) out = out.substr(0, out.rfind(' '));
    return out;
  };
  // Version 3: job and rescale lines without the rescale method; versions 1 and 2: job lines also
  // without the segment's progress and compound flags; version 1's rescale lines also without the
  // lost samples. Every rescale of an old state was a relaunch.
  for (const int version : {1, 2, 3}) {
    std::string old;
    std::istringstream in(state);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("bft-profiling-advisor ", 0) == 0)
        line = "bft-profiling-advisor " + std::to_string(version);
      if (line.rfind("job ", 0) == 0) line = drop_last_fields(line, version == 3 ? 1 : 3);
      if (line.rfind("rescale ", 0) == 0) line = drop_last_fields(line, version == 1 ? 2 : 1);
      old += line + "\n";
    }
    const JobProfile p = ProfilingAdvisor::Load(old).Profile("job");
    ASSERT_EQ(p.rescales.size(), 2u) << version;
    EXPECT_NEAR(p.rescales[1].lost_samples, 15.0 * 800.0, 1e-6) << version;
    EXPECT_EQ(p.rescales[1].method, RescaleMethod::kRelaunch) << version;
    EXPECT_NEAR(p.MethodCosts(RescaleMethod::kRelaunch).mean_scale_up_s, 30.0, 1e-6) << version;
    EXPECT_EQ(p.MethodCosts(RescaleMethod::kInPlace).scale_ups, 0) << version;
  }
}

TEST(CurveAdvisor, MalformedStateIsAParseErrorWithALine) {
  EXPECT_THROW(ProfilingAdvisor::Load(""), ParseError);
  ProfilingAdvisor adv;
  adv.Report("j", 0, 2, 0);
  adv.Report("j", 100, 2, 1000);
  std::string state = adv.Save();
  const auto at = state.find("options ");
  std::string broken = state;
  broken.replace(at, 8, "option ");
  try {
    ProfilingAdvisor::Load(broken);
    FAIL() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), 2);
  }
  EXPECT_THROW(ProfilingAdvisor::Load(state.substr(0, state.size() - 4)), ParseError);
}

TEST(CurveAdvisor, BadReportsThrowNamingTheJob) {
  ProfilingAdvisor adv;
  adv.Report("j", 10.0, 2, 100.0);
  auto message = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message([&] { adv.Report("j", 5.0, 2, 200.0); }).find("job 'j': time_s 5 is before"),
            std::string::npos);
  EXPECT_NE(message([&] { adv.Report("j", 20.0, 2, 50.0); }).find("cumulative_samples 50"),
            std::string::npos);
  EXPECT_NE(message([&] { adv.Report("j", 20.0, -1, 200.0); }).find("node count -1"), std::string::npos);
  EXPECT_NE(message([&] { adv.Report("j", std::nan(""), 2, 200.0); }).find("not finite"), std::string::npos);
  EXPECT_NE(message([&] { adv.Report("", 20.0, 2, 200.0); }).find("empty job id"), std::string::npos);
  // Huge but finite values used to be accepted and made the allocation fail later.
  EXPECT_NE(
      message([&] { adv.Report("j", 20.0, 2, 1e308); }).find("job 'j': cumulative_samples 1e+308 exceeds"),
      std::string::npos);
  EXPECT_NE(message([&] { adv.Report("j", 1e300, 2, 200.0); }).find("job 'j': time_s 1e+300 is beyond"),
            std::string::npos);
  EXPECT_NE(message([&] { adv.Profile("nope"); }).find("unknown job 'nope'"), std::string::npos);
  EXPECT_THROW(adv.ThroughputEstimate("j", 0), InvalidArgument);
  EXPECT_THROW(adv.SetPrior("j", -1.0), InvalidArgument);
  AdvisorOptions bad;
  bad.drift_discount = 2.0;
  EXPECT_THROW(ProfilingAdvisor{bad}, InvalidArgument);
  // A rejected report leaves the state unchanged.
  EXPECT_EQ(adv.Profile("j").last_report_s, 10.0);
}

TEST(CurveAdvisor, ForgetDropsAJob) {
  ProfilingAdvisor adv;
  adv.Report("a", 0, 1, 0);
  adv.Report("b", 0, 1, 0);
  adv.Forget("a");
  adv.Forget("unknown");
  EXPECT_EQ(adv.Jobs(), std::vector<std::string>{"b"});
  EXPECT_FALSE(adv.HasJob("a"));
}

TEST(CurveAdvisor, StoppedJobRecordsNoInterval) {
  ProfilingAdvisor adv;
  adv.Report("j", 0, 0, 0);
  adv.Report("j", 100, 0, 0);
  EXPECT_TRUE(adv.Profile("j").sizes.empty());
}

}  // namespace
}  // namespace bft::curve
