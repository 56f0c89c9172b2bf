// The objectives of the policies that look beyond the paper's (completion_aware, lifetime_aware):
// each is the exact solver on a reshaped problem, so that every guarantee of the allocator holds.
#include <algorithm>
#include <vector>

#include "alloc/internal.h"

namespace bft::alloc::internal {

Problem PolicyProblem(const Problem& problem, SolverKind policy) {
  Problem reshaped = problem;
  // lifetime_aware: a node of the pool is reclaimed at the rate 1 / (its expected idle time). A job
  // pays scale_down_s of its rate once per event however many of its nodes go, and nodes go in
  // blocks: its nodes are taken as reclaimed together, at the pool's mean rate. (Charging every
  // node apart, n times that rate, overstated the loss and starved large jobs: docs/sim.md.)
  double reclaim_per_node_s = 0.0;
  if (policy == SolverKind::kLifetimeAware && !problem.expected_idle_s.empty()) {
    for (const double seconds : problem.expected_idle_s) reclaim_per_node_s += 1.0 / seconds;
    reclaim_per_node_s /= static_cast<double>(problem.expected_idle_s.size());
  }
  const int pool = static_cast<int>(problem.pool.size());
  // A curve of the job's (its own objective or a configuration's, with its rate) reshaped.
  auto reshape = [&](const Job& job, const curve::ThroughputCurve& objective,
                     const curve::ThroughputCurve& rate) {
    std::vector<double> values;
    std::vector<int> at;
    for (int n = 0; n <= std::min(job.max_nodes, pool); ++n) at.push_back(n);
    if (job.max_nodes > pool) at.push_back(job.max_nodes);  // where max-min's normaliser is read
    for (const int n : at) {
      double value = objective.Evaluate(n);
      if (policy == SolverKind::kCompletionAware && job.remaining_samples > 0.0) {
        // Samples beyond the job's remaining work within the horizon are worth nothing.
        const double samples = rate.Evaluate(n) * problem.tfwd_s;
        if (samples > job.remaining_samples) value *= job.remaining_samples / samples;
      }
      if (policy == SolverKind::kLifetimeAware)
        value *= std::max(0.0, 1.0 - job.scale_down_s * reclaim_per_node_s);
      values.push_back(value);
    }
    return curve::ThroughputCurve(at, values);
  };
  for (Job& job : reshaped.jobs) {
    if (job.throughput.empty()) job.throughput = job.objective;  // the rate the allocation reports
    for (Configuration& c : job.configurations) {
      if (c.throughput.empty()) c.throughput = c.objective;
      c.objective = reshape(job, c.objective, c.throughput);
    }
    if (policy == SolverKind::kCompletionAware) {
      // Value in node units: the objective relative to the job's own at its largest size, so that
      // a model slow in samples/s is not starved while it holds an admission slot.
      const int reference = std::min(job.max_nodes, job.objective.nodes().back());
      const double full = job.objective.Evaluate(reference);
      if (reference > 0 && full > 0.0) job.weight *= reference / full;
    }
    job.objective = reshape(job, job.objective, job.throughput);
  }
  return reshaped;
}

std::vector<NodeId> LongestIdleFirst(const Problem& problem) {
  if (problem.expected_idle_s.empty()) return {};
  std::vector<std::size_t> order(problem.pool.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (problem.expected_idle_s[a] != problem.expected_idle_s[b]) {
      return problem.expected_idle_s[a] > problem.expected_idle_s[b];
    }
    return problem.pool[a] < problem.pool[b];
  });
  std::vector<NodeId> nodes(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) nodes[k] = problem.pool[order[k]];
  return nodes;
}

}  // namespace bft::alloc::internal
