// bft::alloc — decide which idle nodes each elastic training job runs on (BFTrainer's allocator).
//
// On every event (nodes become idle, the main scheduler reclaims nodes, a job arrives or ends) the
// caller describes the situation as a Problem and calls Solve(). The result is an Allocation: the
// new node -> job map and, per job, the nodes kept, added and released.
//
// Objective (maximised): tfwd_s * sum_j w_j * O_j(n_j)  -  sum_j w_j * penalty_j, where
//   penalty_j = scale_up_s   * O_j(c_j)  if the job grows   (n_j > c_j),
//               scale_down_s * O_j(c_j)  if the job shrinks (0 < n_j < c_j),
//               (scale_down_s + restart_s) * O_j(c_j)  if it is stopped (n_j = 0 < c_j), else 0,
// c_j is the job's current node count, and O_j(c_j) counts as 0 when c_j < min_nodes (a job
// preempted below its minimum is not running). Constraints: a node runs at most one job; n_j is
// 0 or within [min_nodes, max_nodes]; no migration (a job keeps all its nodes and adds free ones,
// or keeps a subset of its nodes). O_j(0) is 0 whatever the curve says at 0 nodes.
//
// Node identities (every solver but the node-level MILP chooses counts first): a shrinking job
// keeps its lowest-numbered nodes and releases the rest; the free nodes (in the pool and not in
// the current map, plus those just released) go, lowest-numbered first, to the growing jobs in the
// order of Problem::jobs. See docs/alloc.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bft/curve.h"
#include "bft/error.h"
#include "bft/jobs.h"
#include "bft/milp.h"

namespace bft::alloc {

using NodeId = std::int64_t;

// Node names as schedulers give them ("c05n06"), mapped to the NodeIds a Problem holds: 0, 1, 2, ...
// in the order the names are first interned (so "lowest-numbered" above means "interned first").
// A scheduler that names its nodes interns them while it builds the Problem and reads the
// Allocation's nodes back with Name(); a caller with integer ids does not use it and pays nothing.
class NodeNames {
 public:
  // The name's id, adding the name if it is new. Throws InvalidArgument for an empty name or one
  // holding a NUL byte.
  NodeId Intern(const std::string& name);
  // The name's id, or -1 if it was never interned.
  NodeId Find(const std::string& name) const;
  // The name of an interned id; throws InvalidArgument for any other id.
  const std::string& Name(NodeId id) const;
  std::size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;  // NodeId -> name
  std::unordered_map<std::string, NodeId> ids_;
};

// Another way to run a job (structured partial backpropagation): part of the job format.
using jobs::Configuration;

struct Job {
  std::string id;     // non-empty, unique within a Problem
  int min_nodes = 1;  // >= 1
  int max_nodes = 1;  // >= min_nodes; counts above the pool size are simply never reached
  // The value the allocator maximises, O_j(n) (samples/s, speedup, or any metric of the operator's).
  // Must not be empty (the zero curve).
  curve::ThroughputCurve objective;
  // samples/s, used to predict progress (often the same curve as `objective`); when empty, the
  // objective curve is used.
  curve::ThroughputCurve throughput;
  double scale_up_s = 0.0;    // seconds of stalled training when the job grows
  double scale_down_s = 0.0;  // seconds of stalled training when the job shrinks
  // Seconds of training a job taken off all its nodes loses on top of scale_down_s: its later cold
  // start (new processes, the framework's start-up, its checkpoint read). Charged when it is stopped,
  // since a restart from 0 nodes has no current rate to charge; 0: a stop costs what a shrink does.
  double restart_s = 0.0;
  double weight = 1.0;  // multiplies the job's value and penalty in the objective
  // Samples the job still has to process; 0: unknown. The completion_aware policy reads it.
  double remaining_samples = 0.0;
  // The job's other configurations. Its own curves above are configuration 0, "full" (efficiency
  // 1). Every solver but equal share (which keeps full backpropagation) chooses the count and the
  // configuration together and stays exact. Switching configuration restarts a running job: it is
  // charged like a rescale (scale_down_s when its count falls, else scale_up_s).
  // Under Goal::kMaxMinFair a job's normalised value is the best configuration's, and at its current
  // count it is net of a switch's restart (value - restart / tfwd_s), as every solver sees it.
  std::vector<Configuration> configurations;
  int configuration = 0;  // the configuration it runs now: 0, or k for configurations[k - 1]
};

// The allocator's view of a job of the format (a workload line, a bft.allocate dict): its bounds,
// curves, rescale costs, weight and configurations.
Job FromJobSpec(const jobs::JobSpec& spec);

// One entry of the current node -> job map.
struct Assignment {
  NodeId node = 0;
  std::string job;
};

// The largest value the allocator's objective terms may reach: tfwd_s, scale_up_s,
// scale_down_s and scale_down_s + restart_s, each times a job's weight and its largest objective value, must
// stay below it (Problem::IsValid), so that sums over thousands of jobs stay finite and within what the MILP
// solvers take (milp::kMaxMagnitude).
inline constexpr double kMaxObjectiveTerm = 1e15;

// The longest horizon or rescale cost (tfwd_s, scale_up_s, scale_down_s) a front end accepts (the
// manager's flags): a job of the format's fastest curve (jobs::kMaxSamplesPerS) at weight 1 then
// stays within kMaxObjectiveTerm, so no job the format accepts can make the allocator refuse.
inline constexpr double kMaxHorizonS = kMaxObjectiveTerm / jobs::kMaxSamplesPerS;

// The allocator's forward-looking horizon unless told otherwise (Problem::tfwd_s; the replay's too).
inline constexpr double kDefaultTfwdS = 10.0;

struct Problem {
  std::vector<Job> jobs;
  // Every node the allocator may use now, including those already running a job.
  std::vector<NodeId> pool;
  // The current map: which node runs which job. Every node must be in `pool`, at most once,
  // and every job id must be one of `jobs`.
  std::vector<Assignment> current;
  double tfwd_s = kDefaultTfwdS;  // forward-looking horizon in seconds
  // Empty, or for each node of `pool` (same order) the seconds it is expected to stay idle from now
  // (> 0): what the lifetime_aware policy reads (sim::IdleLifetimePredictor makes them from a trace).
  std::vector<double> expected_idle_s;

  // True if valid; else false with a message naming the offending job, node or field in *error.
  bool IsValid(std::string* error) const;
};

// What a policy reads beyond every job's curves, bounds and costs, the pool and the map. Each policy
// declares its inputs (PolicyInfo::inputs); a front end supplies those it can (the replay from its
// trace, the manager from what it knows) and may leave one out: the policy then decides as if it
// were unknown (docs/alloc.md).
enum class PolicyInput {
  kRemainingSamples,  // Job::remaining_samples
  kExpectedIdleS,     // Problem::expected_idle_s
};
const char* ToString(PolicyInput input);  // the field's name: "remaining_samples", "expected_idle_s"

// A registered policy (solver) as front ends see it. What each one optimises and when to choose
// which: docs/alloc.md; the table that registers them: Registry() in libbft/src/alloc/policies.cpp.
struct PolicyInfo {
  std::string name;
  std::vector<PolicyInput> inputs;  // what it reads beyond the problem every policy reads
  // True for the policies that solve a MILP: those a caller may want to run under a time limit and
  // in a child process (SolveOptions::milp: time_limit_s, isolate).
  bool solves_milp = false;
  bool Needs(PolicyInput input) const;
};
// Every registered policy, in the order users are offered them (exact first): the one list of policy
// names (bft replay --policy, bft manager --policy, bft.allocate solver=, sim.POLICIES, alloc.SOLVERS).
const std::vector<PolicyInfo>& Policies();
// The registered policy of that name; throws InvalidArgument naming the field "solver" and the names.
const PolicyInfo& FindPolicy(const std::string& name);

enum class Goal {
  kThroughput,  // the weighted objective above
  kMaxMinFair,  // maximise the smallest normalised value min(1, O_j(n_j) / O_j(max_nodes)) over
                // jobs (1 for a job with O_j(max_nodes) = 0), then the weighted objective among
                // allocations that reach it
};

const char* ToString(Goal goal);  // "throughput", "max_min_fair"
// Throws InvalidArgument naming the goals there are.
Goal GoalFromString(const std::string& name);

struct SolveOptions {
  std::string solver = "exact";  // the name of a registered policy (Policies())
  Goal goal = Goal::kThroughput;
  std::string milp_backend =
      milp::kDefaultBackend;  // for the MILP solvers: a name from milp::RegisteredBackends()
  milp::SolveOptions milp;    // time limit and gap for the MILP solvers
  // Equal share's rule for a job's share q = floor(N / J): false (libbft's), the job gets
  // min(q, max_nodes) if that is at least min_nodes; true (the published BFTrainer replayer's,
  // used by the replay's reference accounting), only if q > min_nodes, so a share equal to the
  // minimum gives 0. Leftovers go first come first served either way.
  bool equal_share_above_min = false;
  bool IsValid(std::string* error) const;
};

// What an allocation is, kept apart from why a MILP solver stopped (Allocation::termination).
// kOptimal is the one "proven optimal" there is.
enum class AllocationStatus {
  kOptimal,    // proven optimal: the exact solver, or a MILP optimal within a relative gap <= 1e-6
               // whose value the exact solver confirms (within the same 1e-6)
  kHeuristic,  // feasible, not proven optimal: the equal-share heuristic, or a MILP that stopped
               // "optimal" within a larger relative gap than 1e-6, or one the exact solver beats
               // (outside the backends' numerical range, docs/alloc.md; the message says by how much)
  kTimeLimit,  // a MILP solver stopped at its time limit with an incumbent: feasible, not proven
  kFailed,     // no solution from the MILP solver (time limit without incumbent, infeasible, error,
               // a crash in an isolated solve, interrupted): every job keeps its nodes where its
               // bounds allow, so the allocation is still feasible
};
const char* ToString(AllocationStatus status);  // "optimal", "heuristic", "time_limit", "failed"

struct JobAllocation {
  std::string id;
  int nodes_before = 0;          // c_j
  int nodes_after = 0;           // n_j
  std::vector<NodeId> kept;      // sorted
  std::vector<NodeId> added;     // sorted
  std::vector<NodeId> released;  // sorted
  int configuration = 0;         // the chosen one (see Job::configurations)
  double rate = 0.0;             // predicted throughput at nodes_after (samples/s)
  double value = 0.0;            // O_j(nodes_after)
  double penalty = 0.0;          // rescale penalty charged in the objective (unweighted)
};

struct Allocation {
  std::vector<JobAllocation> jobs;  // in the order of Problem::jobs
  std::vector<Assignment> map;      // the new node -> job map, sorted by node
  // tfwd_s * sum w_j O_j(n_j) - sum w_j penalty_j; for completion_aware and lifetime_aware, of their
  // reshaped O_j and w_j (as JobAllocation::value and penalty are).
  double objective = 0.0;
  // min over jobs of min(1, O_j(n_j) / O_j(max_nodes)) (a job with O_j(max_nodes) = 0 counts as 1);
  // 1 when there are no jobs. What Goal::kMaxMinFair maximises first.
  double min_normalized_value = 1.0;
  std::string solver;  // the policy that made it (SolveOptions::solver)
  // What the allocation is (see AllocationStatus); the first thing to look at. The optimum is proven
  // exactly when it is kOptimal: the exact solver always; a MILP solver when it stopped optimal with
  // a relative gap <= 1e-6 (a larger SolveOptions::milp.relative_gap can end "optimal" without it)
  // and the exact solver, run on the same problem to check it, finds nothing better.
  AllocationStatus status = AllocationStatus::kOptimal;
  // Why the MILP solver stopped: set by the MILP solvers only (empty for the exact, equal-share,
  // completion_aware and lifetime_aware solvers, which run no MILP). kOptimal means "optimal within
  // the relative gap asked for".
  std::optional<milp::Termination> termination;
  std::string message;
  double wall_time_s = 0.0;
};

// Throws InvalidArgument if the problem or the options are invalid, NotAvailable if a MILP
// backend is asked for that is not registered. Never returns an allocation that breaks a constraint.
Allocation Solve(const Problem& problem, const SolveOptions& options = {});

}  // namespace bft::alloc
