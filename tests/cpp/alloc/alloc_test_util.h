// Helpers for the bft::alloc suites: random problems, the invariant checker every result goes
// through, independent reference optimisers (brute force, plain DP over every count) and a small
// reader of the jobs-*.jsonl workloads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bft/alloc.h"
#include "bft/milp.h"

namespace bft::alloc::testing {

// True if this test binary has the MILP backend (GLPK, CBC) built in.
inline bool HasBackend(const std::string& name) {
  const std::vector<std::string> names = milp::RegisteredBackends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Options naming a solver and a goal, the rest default.
inline SolveOptions With(const std::string& solver, Goal goal = Goal::kThroughput) {
  SolveOptions options;
  options.solver = solver;
  options.goal = goal;
  return options;
}

// A problem with these jobs and a pool of `nodes` free nodes numbered from 100.
inline Problem FreshPool(std::vector<Job> jobs, int nodes) {
  Problem p;
  p.jobs = std::move(jobs);
  for (int k = 0; k < nodes; ++k) p.pool.push_back(100 + k);
  return p;
}

inline Job MakeJob(const std::string& id, int min_nodes, int max_nodes, std::vector<int> nodes,
                   std::vector<double> values, double scale_up_s = 0.0, double scale_down_s = 0.0,
                   double weight = 1.0) {
  Job job;
  job.id = id;
  job.min_nodes = min_nodes;
  job.max_nodes = max_nodes;
  job.objective = curve::ThroughputCurve(nodes, values);
  job.throughput = job.objective;
  job.scale_up_s = scale_up_s;
  job.scale_down_s = scale_down_s;
  job.weight = weight;
  return job;
}

// Independent re-statement of the objective from the public types only.
inline double JobValue(const Job& job, int n) { return n == 0 ? 0.0 : job.objective.Evaluate(n); }
inline double JobTerm(const Problem& p, std::size_t j, int before, int after) {
  const Job& job = p.jobs[j];
  const double current_rate = before >= job.min_nodes ? job.objective.Evaluate(before) : 0.0;
  double penalty = 0.0;
  if (after > before) penalty = job.scale_up_s * current_rate;
  if (after < before) penalty = job.scale_down_s * current_rate;
  if (after == 0 && before > 0) penalty = (job.scale_down_s + job.restart_s) * current_rate;
  return job.weight * (p.tfwd_s * JobValue(job, after) - penalty);
}
inline double NormalizedValue(const Job& job, int n) {
  const double top = job.objective.Evaluate(job.max_nodes);
  if (!(top > 0.0)) return 1.0;
  return std::min(1.0, JobValue(job, n) / top);
}
inline std::vector<int> CurrentCounts(const Problem& p) {
  std::map<std::string, int> count;
  for (const Assignment& a : p.current) ++count[a.job];
  std::vector<int> out;
  for (const Job& job : p.jobs) out.push_back(count[job.id]);
  return out;
}
inline double ObjectiveOfCounts(const Problem& p, const std::vector<int>& counts) {
  const std::vector<int> before = CurrentCounts(p);
  double total = 0.0;
  for (std::size_t j = 0; j < p.jobs.size(); ++j) total += JobTerm(p, j, before[j], counts[j]);
  return total;
}

inline bool Near(double a, double b, double rel = 1e-6) {
  return std::abs(a - b) <= rel * std::max({1.0, std::abs(a), std::abs(b)});
}

// Every constraint of the problem, checked on a result: capacity (each pool node at most once, no
// node outside the pool), min/max, no migration, the per-job lists consistent with the map, and the
// reported objective equal to the objective recomputed from the curves.
inline ::testing::AssertionResult SatisfiesConstraints(const Problem& p, const Allocation& a) {
  auto fail = [](const std::string& why) { return ::testing::AssertionFailure() << why; };
  if (a.jobs.size() != p.jobs.size()) return fail("wrong number of jobs");
  const std::set<NodeId> pool(p.pool.begin(), p.pool.end());
  std::map<NodeId, std::string> before, after;
  for (const Assignment& x : p.current) before[x.node] = x.job;
  for (std::size_t k = 0; k < a.map.size(); ++k) {
    if (k > 0 && !(a.map[k - 1].node < a.map[k].node)) return fail("map not sorted by node or a node twice");
    if (pool.count(a.map[k].node) == 0)
      return fail("node " + std::to_string(a.map[k].node) + " not in the pool");
    after[a.map[k].node] = a.map[k].job;
  }
  std::vector<int> counts;
  for (std::size_t j = 0; j < p.jobs.size(); ++j) {
    const Job& job = p.jobs[j];
    const JobAllocation& ja = a.jobs[j];
    if (ja.id != job.id) return fail("job " + std::to_string(j) + " out of order");
    std::set<NodeId> mine_before, mine_after;
    for (const auto& [node, id] : before)
      if (id == job.id) mine_before.insert(node);
    for (const auto& [node, id] : after)
      if (id == job.id) mine_after.insert(node);
    const int n = static_cast<int>(mine_after.size());
    if (ja.nodes_before != static_cast<int>(mine_before.size())) return fail(job.id + ": wrong nodes_before");
    if (ja.nodes_after != n) return fail(job.id + ": nodes_after disagrees with the map");
    if (n != 0 && (n < job.min_nodes || n > job.max_nodes))
      return fail(job.id + ": " + std::to_string(n) + " nodes, outside [min, max]");
    std::vector<NodeId> kept, added, released;
    for (NodeId x : mine_after) (mine_before.count(x) ? kept : added).push_back(x);
    for (NodeId x : mine_before)
      if (mine_after.count(x) == 0) released.push_back(x);
    if (kept != ja.kept || added != ja.added || released != ja.released)
      return fail(job.id + ": kept/added/released disagree with the maps (or are not sorted)");
    if (!added.empty() && !released.empty()) return fail(job.id + ": migrates (adds and releases nodes)");
    if (!Near(ja.value, JobValue(job, n), 1e-12)) return fail(job.id + ": wrong value");
    counts.push_back(n);
  }
  const double objective = ObjectiveOfCounts(p, counts);
  if (!Near(objective, a.objective, 1e-9))
    return fail("reported objective " + std::to_string(a.objective) + " != recomputed " +
                std::to_string(objective));
  double min_norm = 1.0;
  for (std::size_t j = 0; j < p.jobs.size(); ++j)
    min_norm = std::min(min_norm, NormalizedValue(p.jobs[j], counts[j]));
  if (!Near(min_norm, a.min_normalized_value, 1e-12)) return fail("wrong min_normalized_value");
  return ::testing::AssertionSuccess();
}

inline std::vector<int> Counts(const Allocation& a) {
  std::vector<int> out;
  for (const JobAllocation& ja : a.jobs) out.push_back(ja.nodes_after);
  return out;
}

// Min normalised values closer than this are a tie (the exact solver's tolerance, exact.cpp): two
// jobs' thirds may differ in their last bits.
inline constexpr double kFairnessTolerance = 1e-9;

// Best (min normalised value, objective) by enumerating every count vector: tiny problems only.
struct Reference {
  double objective = 0.0;
  double min_normalized = 1.0;
};
inline Reference BruteForce(const Problem& p, Goal goal) {
  const std::vector<int> before = CurrentCounts(p);
  const int pool = static_cast<int>(p.pool.size());
  Reference best;
  bool found = false;
  std::vector<int> counts(p.jobs.size(), 0);
  auto better = [&](double norm, double obj) {
    if (!found) return true;
    if (goal == Goal::kMaxMinFair) {
      if (norm > best.min_normalized + kFairnessTolerance) return true;
      if (norm < best.min_normalized - kFairnessTolerance) return false;
    }
    return obj > best.objective;
  };
  std::function<void(std::size_t, int)> rec = [&](std::size_t j, int left) {
    if (j == p.jobs.size()) {
      double obj = 0.0, norm = 1.0;
      for (std::size_t i = 0; i < counts.size(); ++i) {
        obj += JobTerm(p, i, before[i], counts[i]);
        norm = std::min(norm, NormalizedValue(p.jobs[i], counts[i]));
      }
      if (better(norm, obj)) best = {obj, norm};
      found = true;
      return;
    }
    counts[j] = 0;
    rec(j + 1, left);
    for (int n = p.jobs[j].min_nodes; n <= std::min(p.jobs[j].max_nodes, left); ++n) {
      counts[j] = n;
      rec(j + 1, left - n);
    }
    counts[j] = 0;
  };
  rec(0, pool);
  return best;
}

// Best throughput objective by a plain DP over every allowed count (no reduction): O(J N max).
inline double PlainDp(const Problem& p) {
  const std::vector<int> before = CurrentCounts(p);
  const int pool = static_cast<int>(p.pool.size());
  std::vector<double> best(pool + 1, 0.0), next(pool + 1);
  for (std::size_t j = 0; j < p.jobs.size(); ++j) {
    const Job& job = p.jobs[j];
    const double stay_out = JobTerm(p, j, before[j], 0);
    for (int x = 0; x <= pool; ++x) {
      double v = best[x] + stay_out;
      for (int n = job.min_nodes; n <= std::min(job.max_nodes, x); ++n)
        v = std::max(v, best[x - n] + JobTerm(p, j, before[j], n));
      next[x] = v;
    }
    best.swap(next);
  }
  return best[pool];
}

struct RandomSpec {
  int max_jobs = 5;
  int max_pool = 10;
  int max_max_nodes = 8;
};

// A random problem: non-concave (even non-monotone) curves, random current maps with jobs below
// their minimum, empty pools, no jobs, more jobs than nodes, weights, node ids not 0..N-1.
inline Problem RandomProblem(std::mt19937_64& rng, const RandomSpec& spec) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Problem p;
  p.tfwd_s = uniform(0, 3) == 0 ? real(0.5, 40.0) : 10.0;
  const int num_jobs = uniform(0, spec.max_jobs);
  const int pool = uniform(0, 4) == 0 ? uniform(0, 2) : uniform(0, spec.max_pool);
  std::set<NodeId> ids;
  while (static_cast<int>(ids.size()) < pool) ids.insert(uniform(0, 3 * spec.max_pool + 5) * 7 - 3);
  p.pool.assign(ids.begin(), ids.end());
  std::shuffle(p.pool.begin(), p.pool.end(), rng);
  for (int j = 0; j < num_jobs; ++j) {
    const int min_nodes = uniform(1, 3);
    const int max_nodes = min_nodes + uniform(0, std::max(0, spec.max_max_nodes - min_nodes));
    std::vector<int> nodes;
    std::vector<double> values;
    const int kind = uniform(0, 3);
    if (kind == 0) {  // linear-ish, measured at powers of two
      const double slope = real(1.0, 100.0);
      for (int b = 1; b <= max_nodes; b *= 2) {
        nodes.push_back(b);
        values.push_back(slope * b * real(0.7, 1.0));
      }
    } else {  // arbitrary non-negative values at random breakpoints (non-concave, non-monotone)
      std::set<int> at;
      const int count = uniform(1, 5);
      for (int k = 0; k < count; ++k) at.insert(uniform(kind == 3 ? 0 : 1, max_nodes + 2));
      for (int b : at) {
        nodes.push_back(b);
        values.push_back(uniform(0, 5) == 0 ? 0.0 : real(0.0, 100.0));
      }
    }
    Job job;
    job.id = "job" + std::to_string(j);
    job.min_nodes = min_nodes;
    job.max_nodes = max_nodes;
    job.objective = curve::ThroughputCurve(nodes, values);
    job.throughput = job.objective;
    job.scale_up_s = uniform(0, 4) == 0 ? 0.0 : real(0.0, 30.0);
    job.scale_down_s = uniform(0, 4) == 0 ? 0.0 : real(0.0, 20.0);
    job.restart_s = uniform(0, 2) == 0 ? 0.0 : real(0.0, 60.0);
    job.weight = uniform(0, 3) == 0 ? real(0.0, 3.0) : 1.0;
    p.jobs.push_back(job);
  }
  // Current map: each node runs a random job or nothing (counts can fall below min or exceed max).
  if (num_jobs > 0)
    for (NodeId node : p.pool)
      if (uniform(0, 2) != 0) p.current.push_back({node, p.jobs[uniform(0, num_jobs - 1)].id});
  return p;
}

}  // namespace bft::alloc::testing
