// bft::alloc::Solve: validation, then the registered policy (policies.cpp), whose solvers of the
// paper are here: exact, equal share and the two MILPs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "alloc/internal.h"

namespace bft::alloc {

namespace {

// Counts that keep every job where it is when that is allowed, else at the nearest allowed count
// below: always feasible (they use at most the nodes already in use). The answer when a MILP solver
// ends without a solution.
std::vector<int> KeepCounts(const internal::Prepared& prepared) {
  std::vector<int> counts(prepared.jobs.size());
  for (std::size_t j = 0; j < counts.size(); ++j) {
    const internal::JobData& d = prepared.jobs[j];
    const int n = std::min(d.current, d.max_nodes);
    counts[j] = n >= d.min_nodes ? n : 0;
  }
  return counts;
}

// True if `value` is below `best` by more than the proven gap (relative, as the MILP's own gap).
bool Below(double value, double best) {
  return value < best - internal::kProvenGap * std::max(1.0, std::abs(best));
}

// A MILP allocation keeps the label optimal only if the exact solver, on the same problem and goal,
// proves nothing better (docs/DESIGN: claims are checked). A backend's optimum holds only within its
// numerical range (docs/milp.md); the exact solver's, combinatorial, holds for every valid problem.
void CheckMilpOptimum(const Problem& problem, const internal::Prepared& prepared, Goal goal,
                      Allocation* allocation) {
  if (allocation->status != AllocationStatus::kOptimal) return;
  const Allocation exact = internal::FromCounts(problem, prepared, internal::ExactCounts(prepared, goal));
  const bool fair = goal == Goal::kMaxMinFair;
  const bool fairness_below = fair && Below(allocation->min_normalized_value, exact.min_normalized_value);
  const bool objective_below =
      !(fair && Below(exact.min_normalized_value, allocation->min_normalized_value)) &&
      Below(allocation->objective, exact.objective);
  if (!fairness_below && !objective_below) return;
  std::ostringstream os;
  os << "; not optimal: the exact solver proves ";
  if (fairness_below) {
    os << "min normalised value " << exact.min_normalized_value << " against "
       << allocation->min_normalized_value;
  } else {
    os << "objective " << exact.objective << " against " << allocation->objective;
  }
  os << " (outside the MILP backends' numerical range: docs/alloc.md)";
  allocation->status = AllocationStatus::kHeuristic;
  allocation->message += os.str();
}

}  // namespace

const char* ToString(AllocationStatus status) {
  switch (status) {
    case AllocationStatus::kOptimal:
      return "optimal";
    case AllocationStatus::kHeuristic:
      return "heuristic";
    case AllocationStatus::kTimeLimit:
      return "time_limit";
    case AllocationStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

Allocation Solve(const Problem& problem, const SolveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  if (!options.IsValid(&error)) throw InvalidArgument("alloc::Solve: options: " + error);
  if (!problem.IsValid(&error)) throw InvalidArgument("alloc::Solve: problem: " + error);
  Allocation allocation = internal::FindRegistration(options.solver)->solve(problem, options);
  allocation.solver = options.solver;
  allocation.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return allocation;
}

namespace internal {

Allocation SolveExact(const Problem& problem, const SolveOptions& options) {
  const Prepared prepared = Prepare(problem);
  Allocation allocation = FromCounts(problem, prepared, ExactCounts(prepared, options.goal));
  allocation.status = AllocationStatus::kOptimal;
  allocation.message = "proven optimal (combinatorial)";
  return allocation;
}

Allocation SolveEqualShare(const Problem& problem, const SolveOptions& options) {
  // Equal share keeps full backpropagation (a job running another configuration is switched back).
  const Prepared prepared = Prepare(problem, ConfigurationChoice::kFull);
  Allocation allocation =
      FromCounts(problem, prepared, EqualShareCounts(prepared, options.equal_share_above_min));
  allocation.status = AllocationStatus::kHeuristic;
  allocation.message = "heuristic: equal share, leftovers first come first served";
  return allocation;
}

namespace {

// The allocation of a MILP solver's outcome: its counts or node map, or, without a solution, every
// job kept where its bounds allow; labelled by how the solver stopped.
Allocation FromMilpOutcome(const Problem& problem, const Prepared& prepared, const SolveOptions& options,
                           const MilpOutcome& outcome, bool node_level) {
  Allocation allocation;
  if (!outcome.has_solution) {
    const Prepared keep = Prepare(problem, ConfigurationChoice::kCurrent);
    allocation = FromCounts(problem, keep, KeepCounts(keep));
    allocation.message = "no solution from the MILP solver (" + outcome.message +
                         "); every job keeps its nodes where its bounds allow";
    // Every allocation problem has a solution (under max-min too: the exact solver's counts meet
    // every bound), so a backend's "infeasible" is its numerical failure, not a proof.
    if (outcome.termination == milp::Termination::kInfeasible ||
        outcome.termination == milp::Termination::kInfeasibleOrUnbounded)
      allocation.message += "; the backend's infeasibility is wrong: the problem always has a solution";
  } else if (node_level) {
    allocation = FromMap(problem, prepared, outcome.job_of_pool_node);
    allocation.message = outcome.message;
  } else {
    allocation = FromCounts(problem, prepared, outcome.counts);
    allocation.message = outcome.message;
  }
  allocation.termination = outcome.termination;
  if (!outcome.has_solution) {
    allocation.status = AllocationStatus::kFailed;
  } else if (outcome.proven_optimal) {
    allocation.status = AllocationStatus::kOptimal;
    CheckMilpOptimum(problem, prepared, options.goal, &allocation);
  } else if (outcome.termination == milp::Termination::kTimeLimit) {
    allocation.status = AllocationStatus::kTimeLimit;
  } else {
    allocation.status = AllocationStatus::kHeuristic;
  }
  return allocation;
}

}  // namespace

Allocation SolveCountMilp(const Problem& problem, const SolveOptions& options) {
  const Prepared prepared = Prepare(problem);
  return FromMilpOutcome(problem, prepared, options, CountMilpOutcome(prepared, options), false);
}

Allocation SolveNodeMilp(const Problem& problem, const SolveOptions& options) {
  const Prepared prepared = Prepare(problem);
  return FromMilpOutcome(problem, prepared, options, NodeMilpOutcome(problem, prepared, options), true);
}

}  // namespace internal

}  // namespace bft::alloc
