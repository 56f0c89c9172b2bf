// bft::alloc::Solve: validation, then one of the solvers, then node assignment and scoring.
#include <algorithm>
#include <chrono>

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
  // Equal share keeps full backpropagation (a job running another configuration is switched back).
  const internal::Prepared prepared = internal::Prepare(problem, options.solver == SolverKind::kEqualShare
                                                                     ? internal::ConfigurationChoice::kFull
                                                                     : internal::ConfigurationChoice::kAny);

  Allocation allocation;
  switch (options.solver) {
    case SolverKind::kExact: {
      allocation = internal::FromCounts(problem, prepared, internal::ExactCounts(prepared, options.goal));
      allocation.status = AllocationStatus::kOptimal;
      allocation.message = "proven optimal (combinatorial)";
      break;
    }
    case SolverKind::kEqualShare: {
      allocation = internal::FromCounts(problem, prepared,
                                        internal::EqualShareCounts(prepared, options.equal_share_above_min));
      allocation.status = AllocationStatus::kHeuristic;
      allocation.message = "heuristic: equal share, leftovers first come first served";
      break;
    }
    case SolverKind::kCompletionAware:
    case SolverKind::kLifetimeAware: {
      const Problem policy = internal::PolicyProblem(problem, options.solver);
      const internal::Prepared policy_prepared = internal::Prepare(policy);
      allocation =
          internal::FromCounts(policy, policy_prepared, internal::ExactCounts(policy_prepared, options.goal),
                               internal::LongestIdleFirst(policy));
      allocation.status = AllocationStatus::kOptimal;
      allocation.message =
          std::string("proven optimal (combinatorial) for the ") + ToString(options.solver) + " objective";
      break;
    }
    case SolverKind::kCountMilp:
    case SolverKind::kNodeMilp: {
      const internal::MilpOutcome outcome = options.solver == SolverKind::kCountMilp
                                                ? internal::SolveCountMilp(prepared, options)
                                                : internal::SolveNodeMilp(problem, prepared, options);
      if (!outcome.has_solution) {
        const internal::Prepared keep = internal::Prepare(problem, internal::ConfigurationChoice::kCurrent);
        allocation = internal::FromCounts(problem, keep, KeepCounts(keep));
        allocation.message = "no solution from the MILP solver (" + outcome.message +
                             "); every job keeps its nodes where its bounds allow";
      } else if (options.solver == SolverKind::kNodeMilp) {
        allocation = internal::FromMap(problem, prepared, outcome.job_of_pool_node);
        allocation.message = outcome.message;
      } else {
        allocation = internal::FromCounts(problem, prepared, outcome.counts);
        allocation.message = outcome.message;
      }
      allocation.termination = outcome.termination;
      if (!outcome.has_solution) {
        allocation.status = AllocationStatus::kFailed;
      } else if (outcome.proven_optimal) {
        allocation.status = AllocationStatus::kOptimal;
      } else if (outcome.termination == milp::Termination::kTimeLimit) {
        allocation.status = AllocationStatus::kTimeLimit;
      } else {
        allocation.status = AllocationStatus::kHeuristic;
      }
      break;
    }
  }
  allocation.solver = options.solver;
  allocation.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return allocation;
}

}  // namespace bft::alloc
