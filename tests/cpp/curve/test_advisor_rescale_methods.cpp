// The profiling advisor's rescale methods: in-place and relaunch costs are measured apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bft/profiling.h"

namespace bft::curve {
namespace {

// A job at 100 samples/s per node that reports every 10 s; after a rescale it stalls for the
// stall of the rescale's method (no progress), then runs steadily.
struct Job {
  double inplace_stall_s = 1.0;
  double relaunch_stall_s = 15.0;
  double t = 0.0;
  double samples = 0.0;

  // Rescales to `nodes` by `method` (none: the caller names none) and runs for duration_s.
  void Run(ProfilingAdvisor& adv, int nodes, double duration_s, std::optional<RescaleMethod> method) {
    adv.Report("job", t, nodes, samples, method);
    const double stall = method == RescaleMethod::kInPlace ? inplace_stall_s : relaunch_stall_s;
    const double start = t;
    while (t < start + duration_s - 1e-9) {
      const double t1 = t + 10.0;
      samples += 100.0 * nodes * std::max(0.0, t1 - std::max(t, start + stall));
      t = t1;
      adv.Report("job", t, nodes, samples);
    }
  }
};

constexpr RescaleMethod kInPlace = RescaleMethod::kInPlace;
constexpr RescaleMethod kRelaunch = RescaleMethod::kRelaunch;

TEST(AdvisorRescaleMethods, InPlaceAndRelaunchCostsAreMeasuredApart) {
  ProfilingAdvisor adv;
  Job job;
  job.Run(adv, 4, 300.0, std::nullopt);
  job.Run(adv, 8, 300.0, kInPlace);
  job.Run(adv, 4, 300.0, kInPlace);
  job.Run(adv, 8, 300.0, kRelaunch);
  job.Run(adv, 4, 300.0, std::nullopt);  // no method named: a relaunch
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.rescales.size(), 5u);
  EXPECT_EQ(p.rescales[1].method, kInPlace);
  EXPECT_EQ(p.rescales[2].method, kInPlace);
  EXPECT_EQ(p.rescales[3].method, kRelaunch);
  EXPECT_EQ(p.rescales[4].method, kRelaunch);
  // Allocator units (seconds at the old size's rate): 4 -> 8 by 1 s at 800/s = 2 s at 400/s,
  // 8 -> 4 by 1 s at 400/s = 0.5 s at 800/s; by relaunch 15 s: 30 s and 7.5 s.
  const RescaleCosts& in = p.MethodCosts(kInPlace);
  EXPECT_EQ(in.scale_ups, 1);
  EXPECT_EQ(in.scale_downs, 1);
  EXPECT_NEAR(in.mean_scale_up_s, 2.0, 1e-6);
  EXPECT_NEAR(in.mean_scale_down_s, 0.5, 1e-6);
  const RescaleCosts& re = p.MethodCosts(kRelaunch);
  EXPECT_NEAR(re.mean_scale_up_s, 30.0, 1e-6);
  EXPECT_NEAR(re.mean_scale_down_s, 7.5, 1e-6);
  double up = 99.0, down = 98.0;
  MeasuredRescaleCosts(p, &up, &down, kInPlace);
  EXPECT_NEAR(up, 2.0, 1e-6);
  EXPECT_NEAR(down, 0.5, 1e-6);
  up = 99.0, down = 98.0;
  MeasuredRescaleCosts(p, &up, &down);  // the default method: relaunch
  EXPECT_NEAR(up, 30.0, 1e-6);
  EXPECT_NEAR(down, 7.5, 1e-6);
}

TEST(AdvisorRescaleMethods, AMethodNotMeasuredYetKeepsTheDefaultsGiven) {
  ProfilingAdvisor adv;
  Job job;
  job.Run(adv, 4, 300.0, kRelaunch);  // a start: not a rescale of either method
  job.Run(adv, 8, 300.0, kRelaunch);
  const JobProfile p = adv.Profile("job");
  EXPECT_EQ(p.MethodCosts(kInPlace).scale_ups, 0);
  double up = 1.5, down = 0.8;
  MeasuredRescaleCosts(p, &up, &down, kInPlace);
  EXPECT_EQ(up, 1.5);
  EXPECT_EQ(down, 0.8);
  MeasuredRescaleCosts(p, &up, &down, kRelaunch);
  EXPECT_NEAR(up, 30.0, 1e-6);
  EXPECT_EQ(down, 0.8);  // no shrink measured
}

TEST(AdvisorRescaleMethods, EachMethodsCostsNeverDependOnTheOthersRescales) {
  // Differential: runs of one random sequence of sizes and methods that differ only in one
  // method's stall measure the other method's costs alike. (Every stall stays within the warm-up,
  // so the runs' steady intervals, and with them the rate estimates, are the same.)
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<int, RescaleMethod>> steps;
    std::uniform_int_distribution<int> size(1, 16), coin(0, 1);
    while (steps.size() < 12) {  // every step a rescale (a repeated size would stall a steady run)
      const int n = size(rng);
      if (steps.empty() || n != steps.back().first) steps.push_back({n, coin(rng) ? kInPlace : kRelaunch});
    }
    auto run = [&](double inplace_stall, double relaunch_stall) {
      ProfilingAdvisor adv;
      Job job;
      job.inplace_stall_s = inplace_stall;
      job.relaunch_stall_s = relaunch_stall;
      for (const auto& [n, method] : steps) job.Run(adv, n, 200.0, method);
      return adv.Profile("job");
    };
    const JobProfile base = run(1.0, 5.0), slow_relaunch = run(1.0, 25.0), slow_inplace = run(25.0, 5.0);
    auto same = [trial](const RescaleCosts& x, const RescaleCosts& y) {
      EXPECT_EQ(x.scale_ups, y.scale_ups) << trial;
      EXPECT_EQ(x.scale_downs, y.scale_downs) << trial;
      EXPECT_NEAR(x.mean_scale_up_s, y.mean_scale_up_s, 1e-9 * (1.0 + x.mean_scale_up_s)) << trial;
      EXPECT_NEAR(x.mean_scale_down_s, y.mean_scale_down_s, 1e-9 * (1.0 + x.mean_scale_down_s)) << trial;
    };
    same(base.MethodCosts(kInPlace), slow_relaunch.MethodCosts(kInPlace));
    same(base.MethodCosts(kRelaunch), slow_inplace.MethodCosts(kRelaunch));
    // ... while the slowed method's own costs grow.
    if (base.MethodCosts(kRelaunch).scale_ups > 0) {
      EXPECT_GT(slow_relaunch.MethodCosts(kRelaunch).mean_scale_up_s,
                base.MethodCosts(kRelaunch).mean_scale_up_s);
    }
    if (base.MethodCosts(kInPlace).scale_ups > 0) {
      EXPECT_GT(slow_inplace.MethodCosts(kInPlace).mean_scale_up_s,
                base.MethodCosts(kInPlace).mean_scale_up_s);
    }
  }
}

TEST(AdvisorRescaleMethods, AFallbackWhileMeasuredRelabelsTheRescale) {
  // An in-place resize that fails and is relaunched at the same size before its overhead was
  // measured counts as a relaunch; a method said after it was measured changes nothing.
  ProfilingAdvisor adv;
  Job job;
  job.Run(adv, 4, 300.0, std::nullopt);
  adv.Report("job", job.t, 8, job.samples, kInPlace);
  job.t += 10.0;
  adv.Report("job", job.t, 8, job.samples);  // no progress yet: still being measured
  job.Run(adv, 8, 300.0, kRelaunch);         // the fallback: same size, now a relaunch
  adv.Report("job", job.t, 8, job.samples, kInPlace);
  const JobProfile p = adv.Profile("job");
  ASSERT_EQ(p.rescales.size(), 2u);
  EXPECT_EQ(p.rescales[1].method, kRelaunch);
  EXPECT_EQ(p.MethodCosts(kInPlace).scale_ups, 0);
  EXPECT_EQ(p.MethodCosts(kRelaunch).scale_ups, 1);
}

TEST(AdvisorRescaleMethods, LabelsRoundTripAndABadOneIsNamed) {
  for (RescaleMethod m : kRescaleMethods) EXPECT_EQ(RescaleMethodFromString(ToString(m)), m);
  EXPECT_STREQ(ToString(kInPlace), "inplace");
  EXPECT_STREQ(ToString(kRelaunch), "relaunch");
  try {
    RescaleMethodFromString("warm");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'warm'"), std::string::npos) << e.what();
  }
  ProfilingAdvisor adv;
  EXPECT_THROW(adv.Report("job", 0.0, 2, 0.0, static_cast<RescaleMethod>(7)), InvalidArgument);
}

TEST(AdvisorRescaleMethods, SaveLoadKeepsTheMethodsAndTheOneBeingMeasured) {
  ProfilingAdvisor adv;
  Job job;
  job.Run(adv, 2, 300.0, std::nullopt);
  job.Run(adv, 4, 300.0, kInPlace);
  job.Run(adv, 2, 300.0, kRelaunch);
  adv.Report("job", job.t, 6, job.samples, kInPlace);  // saved while this one is being measured
  const std::string state = adv.Save();
  EXPECT_EQ(state.rfind("bft-profiling-advisor 4\n", 0), 0u);
  ProfilingAdvisor back = ProfilingAdvisor::Load(state);
  EXPECT_EQ(back.Save(), state);
  Job cont = job;
  job.Run(adv, 6, 300.0, std::nullopt);
  cont.Run(back, 6, 300.0, std::nullopt);
  EXPECT_EQ(back.Save(), adv.Save());
  const JobProfile p = back.Profile("job");
  ASSERT_EQ(p.rescales.size(), 4u);
  EXPECT_EQ(p.rescales[3].method, kInPlace);
  EXPECT_EQ(p.MethodCosts(kInPlace).scale_ups, 2);
  // A bad label in a state is a parse error at its line.
  std::string broken = state;
  const auto at = broken.find(" inplace\n");
  ASSERT_NE(at, std::string::npos);
  broken.replace(at, 9, " warm\n");
  const long line = 1 + std::count(broken.begin(), broken.begin() + static_cast<long>(at), '\n');
  try {
    ProfilingAdvisor::Load(broken);
    FAIL() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), line);
    EXPECT_NE(std::string(e.what()).find("'warm'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bft::curve
