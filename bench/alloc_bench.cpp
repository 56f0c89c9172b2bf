// bench_alloc: solve time of every allocator for jobs x nodes in {10, 100, 1000} x {64, 512, 4734},
// with the ratio to the exact solver measured in the same run (and the objective relative to it).
//
// Instances: jobs with the measured ImageNet curves of ../shared/data (synthetic concave curves
// with the same shape when the file is absent), at the moment of an event: the jobs run where an
// exact allocation put them on 90% of the pool; then 5% of the pool is reclaimed (its jobs shrink,
// some below their minimum) and the other 10% becomes idle.
//
//   bench_alloc --benchmark_filter='exact'              one solver
//   bench_alloc --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Counters: median_ms (this solver, median of the iterations), exact_ms (the exact solver on the
// same instance, median of as many solves, measured just before), ratio_vs_exact, and
// objective_vs_exact (objective / exact objective; 1 for every exact solver).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bft/alloc.h"
#include "bft/jobs.h"
#include "bft/milp.h"
#include "milp/register_built_backends.h"

namespace {

using bft::alloc::Allocation;
using bft::alloc::Job;
using bft::alloc::Problem;
using bft::alloc::SolveOptions;

// Up to `count` jobs from the real workload (read by the library's one reader of the format), or
// synthetic ones of the same shape.
std::vector<Job> Jobs(int count) {
  std::vector<Job> jobs;
  const std::string path = std::string(BFT_SHARED_DATA_DIR) + "/jobs-imagenet-throughput-1001.jsonl";
  if (std::ifstream(path).good()) {
    for (const bft::jobs::JobSpec& spec : bft::jobs::ReadJobs(path)) {
      if (static_cast<int>(jobs.size()) == count) break;
      jobs.push_back(bft::alloc::FromJobSpec(spec));
      jobs.back().id = "job" + std::to_string(jobs.size() - 1);
    }
  }
  std::mt19937_64 rng(7);
  while (static_cast<int>(jobs.size()) < count) {
    Job job;
    job.id = "job" + std::to_string(jobs.size());
    job.min_nodes = 1;
    job.max_nodes = 64;
    job.scale_up_s = std::uniform_real_distribution<double>(17, 19)(rng);
    job.scale_down_s = std::uniform_real_distribution<double>(11, 13)(rng);
    const double base = std::uniform_real_distribution<double>(1000, 8000)(rng);
    const double efficiency = std::uniform_real_distribution<double>(0.6, 0.95)(rng);
    std::vector<int> nodes{0, 1, 2, 4, 8, 16, 32, 64};
    std::vector<double> values;
    for (int n : nodes) values.push_back(base * std::pow(n, efficiency + 0.05));
    job.objective = bft::curve::ThroughputCurve(nodes, values);
    job.throughput = job.objective;
    jobs.push_back(job);
  }
  return jobs;
}

Problem Instance(int num_jobs, int num_nodes) {
  static std::map<std::pair<int, int>, Problem> cache;
  const auto key = std::make_pair(num_jobs, num_nodes);
  const auto hit = cache.find(key);
  if (hit != cache.end()) return hit->second;
  std::mt19937_64 rng(static_cast<std::uint64_t>(num_jobs) * 10007 + num_nodes);
  Problem before;
  before.jobs = Jobs(num_jobs);
  std::vector<bft::alloc::NodeId> nodes(num_nodes);
  for (int k = 0; k < num_nodes; ++k) nodes[k] = k;
  std::shuffle(nodes.begin(), nodes.end(), rng);
  const int old_pool = num_nodes * 9 / 10;
  before.pool.assign(nodes.begin(), nodes.begin() + old_pool);
  const Allocation previous = bft::alloc::Solve(before);
  Problem p;
  p.jobs = before.jobs;
  const int reclaimed = num_nodes / 20;
  std::vector<bft::alloc::NodeId> gone(nodes.begin(), nodes.begin() + reclaimed);
  std::sort(gone.begin(), gone.end());
  p.pool.assign(nodes.begin() + reclaimed, nodes.end());
  for (const bft::alloc::Assignment& a : previous.map)
    if (!std::binary_search(gone.begin(), gone.end(), a.node)) p.current.push_back(a);
  cache.emplace(key, p);
  return p;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void BM_Solve(benchmark::State& state, const std::string& solver, const std::string& backend) {
  const Problem p = Instance(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  SolveOptions options;
  options.solver = solver;
  options.milp_backend = backend;
  options.milp.time_limit_s = 60.0;  // a solve that hits it reports time_limit, not optimal
  std::vector<double> times;
  Allocation result;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    result = bft::alloc::Solve(p, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds);
    times.push_back(seconds);
    benchmark::DoNotOptimize(result);
  }
  // The exact solver on the same instance, as many solves (at least 3, at most 200).
  std::vector<double> exact_times;
  Allocation exact;
  const int reps = std::clamp(static_cast<int>(times.size()), 3, 200);
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    exact = bft::alloc::Solve(p);
    exact_times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double median = Median(times), exact_median = Median(exact_times);
  state.counters["median_ms"] = median * 1e3;
  state.counters["exact_ms"] = exact_median * 1e3;
  state.counters["ratio_vs_exact"] = median / exact_median;
  state.counters["objective_vs_exact"] = exact.objective != 0.0 ? result.objective / exact.objective : 1.0;
  state.counters["optimal"] = result.status == bft::alloc::AllocationStatus::kOptimal ? 1 : 0;
  state.SetLabel(bft::alloc::ToString(result.status));
}

// Sizes per solver: jobs x nodes in {10, 100, 1000} x {64, 512, 4734}, up to max_jobs jobs and
// max_jobs_times_nodes binaries. The MILP solvers stop where a solve takes minutes (bench/README.md).
void Sizes(benchmark::internal::Benchmark* b, int max_jobs, long max_jobs_times_nodes) {
  for (int jobs : {10, 100, 1000})
    for (int nodes : {64, 512, 4734})
      if (jobs <= max_jobs && static_cast<long>(jobs) * nodes <= max_jobs_times_nodes) b->Args({jobs, nodes});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

int RegisterAll() {
  bft::milp::internal::RegisterBuiltBackends();
  const long all = 1L << 40;
  Sizes(benchmark::RegisterBenchmark("exact", BM_Solve, "exact", std::string()), 1000, all);
  Sizes(benchmark::RegisterBenchmark("equal_share", BM_Solve, "equal_share", std::string()), 1000, all);
  for (const std::string& backend : bft::milp::RegisteredBackends()) {
    const std::string count = "count_milp/" + backend, node = "node_milp/" + backend;
    Sizes(benchmark::RegisterBenchmark(count.c_str(), BM_Solve, "count_milp", backend)->Iterations(3), 100,
          all);
    Sizes(benchmark::RegisterBenchmark(node.c_str(), BM_Solve, "node_milp", backend)->Iterations(1), 100,
          100 * 512);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
