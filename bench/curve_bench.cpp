// Fit time of the throughput models (bft::curve::Fit) for 8 and 64 samples, per model and for the
// automatic choice (leave-one-out and AICc), plus the advisor's per-report cost.
// Samples: a USL-shaped curve with 3% deterministic multiplicative noise, at 8 node counts
// (1, 2, 4, ..., 128) or 64 node counts (1..64).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "bft/curve.h"
#include "bft/profiling.h"

namespace {

using bft::curve::FitOptions;
using bft::curve::Model;
using bft::curve::Sample;
using bft::curve::Selection;

std::vector<Sample> MakeSamples(int count) {
  std::mt19937 rng(12345);
  std::normal_distribution<double> eps(0.0, 0.03);
  std::vector<Sample> s;
  for (int i = 0; i < count; ++i) {
    const double n = count <= 8 ? std::ldexp(1.0, i) : i + 1.0;
    const double x = 1000.0 * n / (1.0 + 0.02 * (n - 1.0) + 2e-4 * n * (n - 1.0));
    s.push_back({n, x * (1.0 + eps(rng)), 1.0});
  }
  return s;
}

void BM_Fit(benchmark::State& state, Model model, Selection selection) {
  const std::vector<Sample> samples = MakeSamples(static_cast<int>(state.range(0)));
  FitOptions opt;
  opt.model = model;
  opt.selection = selection;
  for (auto _ : state) {
    auto result = bft::curve::Fit(samples, opt);
    benchmark::DoNotOptimize(result);
  }
  state.SetLabel(bft::curve::ToString(bft::curve::Fit(samples, opt).model()));
}

BENCHMARK_CAPTURE(BM_Fit, amdahl, Model::kAmdahl, Selection::kLeaveOneOut)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(BM_Fit, optimus, Model::kOptimus, Selection::kLeaveOneOut)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(BM_Fit, comm_log, Model::kCommLog, Selection::kLeaveOneOut)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(BM_Fit, usl, Model::kUsl, Selection::kLeaveOneOut)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(BM_Fit, auto_loo, Model::kAuto, Selection::kLeaveOneOut)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(BM_Fit, auto_aicc, Model::kAuto, Selection::kAicc)->Arg(8)->Arg(64);

// One progress report to an advisor that has measured 6 sizes (each report refits the curve).
void BM_AdvisorReport(benchmark::State& state) {
  bft::curve::ProfilingAdvisor adv;
  double t = 0.0, samples = 0.0;
  for (int n : {1, 2, 4, 8, 16, 32}) {
    for (int k = 0; k < 20; ++k) {
      adv.Report("job", t, n, samples);
      t += 10.0;
      samples += 10.0 * 1000.0 * n / (1.0 + 0.02 * (n - 1.0)) * (1.0 + 0.01 * ((k % 5) - 2));
    }
  }
  int k = 0;
  for (auto _ : state) {
    adv.Report("job", t, 32, samples);
    t += 10.0;
    samples += 10.0 * 24000.0 * (1.0 + 0.01 * ((k++ % 5) - 2));
  }
}
BENCHMARK(BM_AdvisorReport);

}  // namespace

BENCHMARK_MAIN();
