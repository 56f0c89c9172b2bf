// Trace replay benchmarks: the full Summit trace (846,856 transitions, 14.9 days, 4,734 nodes)
// with the 1,001-job ImageNet workload, under the exact optimiser and the equal-share heuristic,
// plus reading the trace and the embedded synthetic default of `bft replay`.
//
//   build/bench/bench/bench_sim --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>

#include "bft/sim.h"

namespace {

const std::string kTrace = std::string(BFT_SHARED_DATA_DIR) + "/summit-idle-nodes-2021-02.csv.gz";
const std::string kJobs = std::string(BFT_SHARED_DATA_DIR) + "/jobs-imagenet-throughput-1001.jsonl";

struct Summit {
  bft::sim::Trace trace;
  std::vector<bft::sim::JobSpec> jobs;
};

const Summit* LoadSummit() {
  static const Summit* data = []() -> const Summit* {
    if (!std::filesystem::exists(kTrace) || !std::filesystem::exists(kJobs)) return nullptr;
    return new Summit{bft::sim::ReadTrace(kTrace), bft::sim::ReadJobs(kJobs)};
  }();
  return data;
}

void ReportSummary(benchmark::State& state, const bft::sim::Summary& s) {
  state.counters["events"] = s.events;
  state.counters["alloc_calls"] = s.allocator_calls;
  state.counters["alloc_total_s"] = s.allocator_total_s;
  state.counters["alloc_p50_us"] = s.allocator_p50_s * 1e6;
  state.counters["alloc_p99_us"] = s.allocator_p99_s * 1e6;
  state.counters["samples_done"] = s.samples_done;
  state.counters["idle_capture"] = s.idle_capture;
  state.counters["jobs_finished"] = s.jobs_finished;
  state.counters["makespan_h"] = s.makespan_s / 3600;
}

void BM_ReadSummitTrace(benchmark::State& state) {
  if (!std::filesystem::exists(kTrace)) {
    state.SkipWithError(("real data not found: " + kTrace).c_str());
    return;
  }
  std::size_t n = 0;
  for (auto _ : state) {
    const bft::sim::Trace t = bft::sim::ReadTrace(kTrace);
    n = t.transitions.size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["transitions"] = static_cast<double>(n);
}
BENCHMARK(BM_ReadSummitTrace)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ReplaySummit(benchmark::State& state, std::string solver, bft::sim::CurveMode curves) {
  const Summit* data = LoadSummit();
  if (data == nullptr) {
    state.SkipWithError("real data not found in " BFT_SHARED_DATA_DIR);
    return;
  }
  bft::sim::ReplayOptions options;
  options.solve.solver = solver;
  options.curves = curves;
  options.record_job_progress = false;
  bft::sim::Summary summary;
  for (auto _ : state) {
    summary = bft::sim::Replay(data->trace, data->jobs, options).summary;
  }
  ReportSummary(state, summary);
}
BENCHMARK_CAPTURE(BM_ReplaySummit, exact, "exact", bft::sim::CurveMode::kOracle)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ReplaySummit, equal_share, "equal_share", bft::sim::CurveMode::kOracle)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
// Curves learned online by the profiling advisor (two curve queries per admitted job per event).
BENCHMARK_CAPTURE(BM_ReplaySummit, exact_learned, "exact", bft::sim::CurveMode::kLearned)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// The embedded default of `bft replay`: synthetic trace and jobs (seed 1), exact optimiser.
void BM_ReplaySyntheticDefault(benchmark::State& state) {
  const bft::sim::SyntheticWorkload w = bft::sim::GenerateSynthetic();
  bft::sim::Summary summary;
  for (auto _ : state) summary = bft::sim::Replay(w.trace, w.jobs, {}).summary;
  ReportSummary(state, summary);
}
BENCHMARK(BM_ReplaySyntheticDefault)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
