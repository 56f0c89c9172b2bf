// Internals of bft::alloc shared by the solvers: the problem reduced to per-job tables, the
// count-level objective, and node assignment from counts.
#pragma once

#include <string>
#include <vector>

#include "bft/alloc.h"

namespace bft::alloc::internal {

// One job of a valid Problem, reduced to what every solver needs.
struct JobData {
  int min_nodes = 1;
  int max_nodes = 1;           // min(Job::max_nodes, |pool|): no job can use more than the pool
  int current = 0;             // c_j: nodes it runs on now
  double current_value = 0.0;  // O_j(c_j), or 0 when c_j < min_nodes (the job is not running)
  double up_penalty = 0.0;     // scale_up_s * current_value (unweighted)
  double down_penalty = 0.0;   // scale_down_s * current_value (unweighted)
  double stop_penalty = 0.0;   // (scale_down_s + restart_s) * current_value: taken to 0 nodes
  double weight = 1.0;
  std::vector<double> value;          // O_j(n) for n = 0..max_nodes, value[0] = 0
  std::vector<int> breakpoints;       // curve breakpoints inside [1, max_nodes]
  std::vector<NodeId> current_nodes;  // sorted
  // Jobs with configurations: value[n] is the best over them, less a switch's penalty / tfwd_s
  // (at n = current: elsewhere the rescale penalty is charged anyway); configuration[n] is the
  // one that gives it, switch_penalty[n] the penalty folded in. Empty for the others.
  std::vector<int> configuration;
  std::vector<double> switch_penalty;
  double normalizer = 0.0;  // the value at Job::max_nodes (the best configuration's): for max-min
};

struct Prepared {
  std::vector<JobData> jobs;  // in the order of Problem::jobs
  int pool_size = 0;
  double tfwd_s = 10.0;
};

// Which configurations (Job::configurations) a job's table is built from: the best of all at each
// count (the exact solvers), full backpropagation only (equal share), or the one it runs now (the
// fallback of a failed MILP solve, where every job keeps what it has). A change from the current
// configuration at the current count pays its restart.
enum class ConfigurationChoice { kAny, kFull, kCurrent };

// Assumes problem.IsValid().
Prepared Prepare(const Problem& problem, ConfigurationChoice choice = ConfigurationChoice::kAny);

// True if n is a count job may run on: 0 or within [min_nodes, max_nodes].
inline bool Feasible(const JobData& job, int n) {
  return n == 0 || (n >= job.min_nodes && n <= job.max_nodes);
}
// Unweighted rescale penalty of moving from c_j to n nodes.
inline double Penalty(const JobData& job, int n) {
  if (n > job.current) return job.up_penalty;
  if (n < job.current) return n == 0 ? job.stop_penalty : job.down_penalty;
  return 0.0;
}
// The job's weighted contribution to the objective at n nodes: w * (tfwd * O(n) - penalty(n)).
inline double Contribution(const JobData& job, int n, double tfwd_s) {
  return job.weight * (tfwd_s * job.value[n] - Penalty(job, n));
}
// Counts in [0, max_nodes] where a job's contribution stops being linear in n: the curve's
// breakpoints and, with around_current, c - 1, c, c + 1 where the rescale penalty jumps. The exact
// solver's exchange argument and the count-level MILP's exactness both rest on this one set.
// Sorted, without duplicates.
std::vector<int> LinearityBreaks(const JobData& job, bool around_current);
// Normalised value min(1, O(n) / O(max_nodes)) used by the max-min goal; 1 for a job whose curve is
// 0 at max_nodes (it has nothing to gain, so it never limits the minimum).
double NormalizedValue(const JobData& job, int n);
// Normalised values equal in exact arithmetic (a third of two jobs' curves) can differ in their last
// bits: a count within this of the max-min threshold meets it, as it would within a MILP's feasibility
// tolerance (values are in [0, 1]). Without it the exact solver excluded such a count and returned a
// worse allocation than the MILPs as optimal. The MILPs' fairness bounds use the same predicate.
constexpr double kFairnessTolerance = 1e-9;
inline bool MeetsThreshold(double normalized, double tau) { return normalized >= tau - kFairnessTolerance; }
// A configuration's value at n nodes (efficiency x objective; 0 is the job's own curves) and its rate curve.
double ConfigurationValue(const Job& job, int configuration, int n);
const curve::ThroughputCurve& ConfigurationRate(const Job& job, int configuration);

// True if the counts fit the pool and every job's [min, max]; else false with the reason.
bool CheckCounts(const Prepared& prepared, const std::vector<int>& counts, std::string* error);

// Turns per-job counts (CheckCounts must pass) into an Allocation without migration: a growing job
// keeps all its nodes and takes the most preferred free ones (free in the pool or released by a
// shrinking job), jobs taking theirs in the order of Problem::jobs; a shrinking job keeps its most
// preferred nodes and releases the rest. `preference` lists the pool's nodes best first; empty:
// lowest-numbered first.
Allocation FromCounts(const Problem& problem, const Prepared& prepared, const std::vector<int>& counts,
                      const std::vector<NodeId>& preference = {});

// One registered policy: what front ends see of it and the function that solves with it. Solve()
// validates the problem and options, calls `solve`, then stamps the policy's name and the wall time.
using PolicySolve = Allocation (*)(const Problem& problem, const SolveOptions& options);
struct Registration {
  PolicyInfo info;
  PolicySolve solve = nullptr;
};
// The one table of policies (policies.cpp), in the order users are offered them.
const std::vector<Registration>& Registry();
// The registration of that name, or nullptr.
const Registration* FindRegistration(const std::string& name);
// Why `name` is no policy, naming the field (solver) and the policies there are.
std::string UnknownPolicy(const std::string& name);

// The solvers of the paper (alloc.cpp), registered in policies.cpp beside the policies of their own
// objective, which are defined there.
Allocation SolveExact(const Problem& problem, const SolveOptions& options);
Allocation SolveEqualShare(const Problem& problem, const SolveOptions& options);
Allocation SolveCountMilp(const Problem& problem, const SolveOptions& options);
Allocation SolveNodeMilp(const Problem& problem, const SolveOptions& options);

// Builds the Allocation of a complete new node -> job map (job indices per pool node, -1 free).
// Throws bft::Error if the map migrates a job (it both adds and releases nodes) or breaks min/max.
Allocation FromMap(const Problem& problem, const Prepared& prepared,
                   const std::vector<int>& job_of_pool_node);

// Fills objective, min normalised value, per-job value/rate/penalty from counts.
void Score(const Problem& problem, const Prepared& prepared, Allocation* allocation);

// Solvers on counts.
std::vector<int> ExactCounts(const Prepared& prepared, Goal goal);
std::vector<int> EqualShareCounts(const Prepared& prepared, bool share_above_min);
// The largest threshold t such that every job can reach normalised value >= t within the pool
// (0 when some job must stay at 0 nodes).
double MaxMinThreshold(const Prepared& prepared);
// The counts 0..max_nodes a job may take: feasible ones, and under max-min those meeting tau. The
// exact solver chooses among them; the MILPs bound their counts by them (milp_solvers.cpp).
std::vector<char> AllowedCounts(const JobData& job, Goal goal, double tau);

// A MILP result counts as a proven optimum only with a relative gap this small, and only if the
// exact solver proves nothing better by more than this (alloc.cpp, CheckMilpOptimum).
constexpr double kProvenGap = 1e-6;

// MILP solvers (milp_solvers.cpp). They fill counts or a node map and the solver status fields.
struct MilpOutcome {
  bool has_solution = false;
  std::vector<int> counts;            // count-level
  std::vector<int> job_of_pool_node;  // node-level (empty for count-level)
  milp::Termination termination = milp::Termination::kError;
  bool proven_optimal = false;
  std::string message;
};
MilpOutcome CountMilpOutcome(const Prepared& prepared, const SolveOptions& options);
MilpOutcome NodeMilpOutcome(const Problem& problem, const Prepared& prepared, const SolveOptions& options);

}  // namespace bft::alloc::internal
