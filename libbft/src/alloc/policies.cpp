// The one table of policies (Registry: a policy is added here, with its name, its function and the
// inputs it reads), and the policies that look beyond the paper's objective (completion_aware,
// lifetime_aware): each is the exact solver on a reshaped problem, so that every guarantee of the
// allocator holds.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "alloc/internal.h"

namespace bft::alloc {

namespace internal {

namespace {

// The problem with every job's curves (its own and its configurations') reshaped: `value` maps a
// job's objective value at n nodes, with its rate there, to the policy's. The rate curves stay.
Problem Reshaped(const Problem& problem,
                 const std::function<double(const Job& job, double value, double rate)>& value) {
  Problem reshaped = problem;
  const int pool = static_cast<int>(problem.pool.size());
  auto reshape = [&](const Job& job, const curve::ThroughputCurve& objective,
                     const curve::ThroughputCurve& rate) {
    std::vector<double> values;
    std::vector<int> at;
    for (int n = 0; n <= std::min(job.max_nodes, pool); ++n) at.push_back(n);
    if (job.max_nodes > pool) at.push_back(job.max_nodes);  // where max-min's normaliser is read
    for (const int n : at) values.push_back(value(job, objective.Evaluate(n), rate.Evaluate(n)));
    return curve::ThroughputCurve(at, values);
  };
  for (Job& job : reshaped.jobs) {
    if (job.throughput.empty()) job.throughput = job.objective;  // the rate the allocation reports
    for (Configuration& c : job.configurations) {
      if (c.throughput.empty()) c.throughput = c.objective;
      c.objective = reshape(job, c.objective, c.throughput);
    }
    job.objective = reshape(job, job.objective, job.throughput);
  }
  return reshaped;
}

// The exact solver on a policy's reshaped problem; `preference` orders the pool's nodes (FromCounts).
Allocation SolveReshaped(const Problem& reshaped, const SolveOptions& options,
                         const std::vector<NodeId>& preference = {}) {
  const Prepared prepared = Prepare(reshaped);
  Allocation allocation = FromCounts(reshaped, prepared, ExactCounts(prepared, options.goal), preference);
  allocation.status = AllocationStatus::kOptimal;
  allocation.message = "proven optimal (combinatorial) for the " + options.solver + " objective";
  return allocation;
}

// The pool's nodes by how long they are expected to stay idle, longest first (ties by node id);
// empty when the problem has no expected_idle_s.
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

Allocation SolveCompletionAware(const Problem& problem, const SolveOptions& options) {
  // Samples beyond the job's remaining work within the horizon are worth nothing.
  Problem reshaped = Reshaped(problem, [&](const Job& job, double value, double rate) {
    const double samples = rate * problem.tfwd_s;
    if (job.remaining_samples > 0.0 && samples > job.remaining_samples)
      value *= job.remaining_samples / samples;
    return value;
  });
  // Value in node units: the objective relative to the job's own at its largest size, so that a
  // model slow in samples/s is not starved while it holds an admission slot.
  for (std::size_t j = 0; j < reshaped.jobs.size(); ++j) {
    const Job& job = problem.jobs[j];
    const int reference = std::min(job.max_nodes, job.objective.nodes().back());
    const double full = job.objective.Evaluate(reference);
    if (reference > 0 && full > 0.0) reshaped.jobs[j].weight *= reference / full;
  }
  return SolveReshaped(reshaped, options);
}

Allocation SolveLifetimeAware(const Problem& problem, const SolveOptions& options) {
  // A node of the pool is reclaimed at the rate 1 / (its expected idle time). A job pays
  // scale_down_s of its rate once per event however many of its nodes go, and nodes go in blocks:
  // its nodes are taken as reclaimed together, at the pool's mean rate. (Charging every node apart,
  // n times that rate, overstated the loss and starved large jobs: docs/sim.md.) Without
  // expected_idle_s the rate is 0: the exact solver's objective.
  double reclaim_per_node_s = 0.0;
  for (const double seconds : problem.expected_idle_s) reclaim_per_node_s += 1.0 / seconds;
  if (!problem.expected_idle_s.empty())
    reclaim_per_node_s /= static_cast<double>(problem.expected_idle_s.size());
  const Problem reshaped = Reshaped(problem, [&](const Job& job, double value, double) {
    return value * std::max(0.0, 1.0 - job.scale_down_s * reclaim_per_node_s);
  });
  return SolveReshaped(reshaped, options, LongestIdleFirst(problem));
}

}  // namespace

const std::vector<Registration>& Registry() {
  // One entry per policy, in the order users are offered them (exact first):
  // {{name, inputs it reads, solves a MILP}, its function}.
  static const std::vector<Registration> registry = {
      {{"exact", {}, false}, SolveExact},
      {{"equal_share", {}, false}, SolveEqualShare},
      {{"completion_aware", {PolicyInput::kRemainingSamples}, false}, SolveCompletionAware},
      {{"lifetime_aware", {PolicyInput::kExpectedIdleS}, false}, SolveLifetimeAware},
      {{"count_milp", {}, true}, SolveCountMilp},
      {{"node_milp", {}, true}, SolveNodeMilp},
  };
  return registry;
}

const Registration* FindRegistration(const std::string& name) {
  for (const Registration& r : Registry())
    if (r.info.name == name) return &r;
  return nullptr;
}

std::string UnknownPolicy(const std::string& name) {
  std::string names;
  for (const Registration& r : Registry()) names += (names.empty() ? "" : ", ") + r.info.name;
  return "solver: unknown solver '" + name + "' (expected one of " + names + ")";
}

}  // namespace internal

const char* ToString(PolicyInput input) {
  switch (input) {
    case PolicyInput::kRemainingSamples:
      return "remaining_samples";
    case PolicyInput::kExpectedIdleS:
      return "expected_idle_s";
  }
  return "unknown";
}

bool PolicyInfo::Needs(PolicyInput input) const {
  return std::find(inputs.begin(), inputs.end(), input) != inputs.end();
}

const std::vector<PolicyInfo>& Policies() {
  static const std::vector<PolicyInfo> policies = [] {
    std::vector<PolicyInfo> out;
    for (const internal::Registration& r : internal::Registry()) out.push_back(r.info);
    return out;
  }();
  return policies;
}

const PolicyInfo& FindPolicy(const std::string& name) {
  if (const internal::Registration* r = internal::FindRegistration(name)) return r->info;
  throw InvalidArgument(internal::UnknownPolicy(name));
}

}  // namespace bft::alloc
