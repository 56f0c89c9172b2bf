// The replay engine's internals, shared by its source files (replay.cpp: the events; accounting.cpp:
// the two accounting models; summary.cpp: the summary; options.cpp: options and names).
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bft/profiling.h"
#include "bft/sim.h"

namespace bft::sim::engine {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Two finish times closer than this (seconds) are handled in the same event.
inline constexpr double kTimeEps = 1e-6;

struct JobState {
  enum class Phase { kWaiting, kActive, kFinished };
  Phase phase = Phase::kWaiting;
  std::vector<NodeId> nodes;  // sorted
  double done = 0.0;          // net of losses; never below 0 in continuous accounting
  double gross = 0.0;         // sum of rate * dt: what the allocations would have done without losses
  double loss = 0.0;          // every loss charged, in full
  // The part of the losses not yet taken out of `done` (a loss larger than the samples done):
  // later progress pays it first. done - debt = gross - loss; done > 0 implies debt == 0.
  double debt = 0.0;
  double rate = 0.0;  // true samples/s on the current nodes
  double finish_at = kInf;
  double admit_s = -1.0;
  double finish_s = -1.0;
  double node_seconds = 0.0;
  int rescales = 0;
  int preemptions = 0;
  // A running job stopped (by the allocator, or a reclaim below its minimum) owes its cold start
  // (JobSpec::restart_s), charged when it runs again and at that rate: as a real job pays it.
  bool restart_owed = false;
  // Per event: nodes reclaimed from this job at the current event, and its rate before the event.
  bool reclaimed_now = false;
  double rate_before_event = 0.0;
  // What the job's own sample counter shows (learned mode): monotone; a loss appears as a stall.
  double counter = 0.0;
  int configuration = 0;  // 0: full backpropagation; k: JobSpec::configurations[k - 1]
  int configuration_switches = 0;
  double partial_node_seconds = 0.0;
  // Learned mode: the raw samples processed in each configuration (what that configuration's
  // advisor sees), and the counter up to which progress has been credited to them.
  std::vector<double> configuration_samples;
  double credited_counter = 0.0;
  // The rescale costs the allocator was last given for this job (the spec's until measured).
  double allocator_scale_up_s = 0.0;
  double allocator_scale_down_s = 0.0;
};

class Engine;

// How samples are counted and which events a replay steps through (docs/sim.md, "Accounting"):
// continuous (the default) or the published replayer's (Accounting::kReference). Each rule that
// differs between the two is one method here, so the engine never asks which model it runs.
class AccountingModel {
 public:
  virtual ~AccountingModel() = default;
  // Whether `nodes` may name a node the trace never mentions (a node that is never idle).
  virtual bool CountsNodesAbsentFromTrace() const = 0;
  // The window's start, and whether a transition at `time_s` is applied before its first event.
  virtual double WindowStart(const Trace& trace, const ReplayOptions& options) const = 0;
  virtual bool AppliedBeforeStart(double time_s, double start_s) const = 0;
  // The allocator's rules this accounting needs on top of the caller's.
  virtual void Adjust(alloc::SolveOptions* solve) const = 0;
  // Progress over dt up to t at the job's current rate (may finish the job).
  virtual void Progress(JobState& job, const JobSpec& spec, double dt, double t) const = 0;
  // Settles an active job before retirement (may finish it: progress beyond the work is a loss).
  virtual void Settle(JobState& job, const JobSpec& spec) const = 0;
  // Charges a loss in full (none for samples <= 0 or NaN).
  void Charge(JobState& job, double samples) const {
    if (samples > 0.0) Take(job, samples);
  }
  // The origin of a finished job's turnaround, and of the makespan.
  virtual double TurnaroundOrigin(double submit_s, double start_s) const = 0;
  virtual double MakespanOrigin(double start_s, double first_submit_s) const = 0;
  // Steps the engine through the window's events.
  virtual void RunEvents(Engine& engine) const = 0;

 private:
  virtual void Take(JobState& job, double samples) const = 0;  // Charge's rule, for samples > 0
};

std::unique_ptr<const AccountingModel> MakeAccountingModel(Accounting accounting);

double Percentile(std::vector<double> values, double q);

class Engine {
 public:
  Engine(const Trace& trace, const std::vector<JobSpec>& specs, const ReplayOptions& options)
      : trace_(trace),
        specs_(specs),
        opt_(options),
        jobs_(specs.size()),
        accounting_(MakeAccountingModel(options.accounting)),
        solve_(options.solve) {}

  ReplayResult Run();
  // The two event schedules; the accounting model picks one (AccountingModel::RunEvents).
  void RunContinuous();
  void RunReference();

 private:
  void SetupNodes();
  void SetupWindow();
  void AddIdle(NodeId node);
  void RemoveIdle(NodeId node);
  void ObserveLifetime(const Transition& x);
  void Advance(double t);
  void RetireFinished(double t);
  void ApplyTransitions(double t, int* transitions, int* preemptions);
  bool Admit(double t, bool* arrived);
  void Decide(double t, int transitions, int preemptions, bool allocate);
  void Summarize();
  void CreditCounter(JobState& job, const JobSpec& spec);
  void ReportConfiguration(int j, double t, int configuration, int nodes);
  alloc::Job LearnedJob(int j);
  double LearnedRate(int j) const;
  double Allocate(double t, int* rescales);
  void CheckInterrupt() const;
  void ReportToAdvisor(double t);
  void RecordStep(double t, int transitions, int rescales, int preemptions, double allocator_s);
  double NextFinish() const;

  const Trace& trace_;
  const std::vector<JobSpec>& specs_;
  const ReplayOptions& opt_;
  std::vector<JobState> jobs_;
  ReplayResult result_;

  const std::unique_ptr<const AccountingModel> accounting_;  // options.accounting's rules
  double now_ = 0.0;
  double start_ = 0.0;
  double end_ = 0.0;
  std::size_t next_transition_ = 0;  // the first transition of the trace not yet applied
  // Nodes.
  std::vector<char> in_subset_;
  std::vector<char> idle_;
  std::vector<int> owner_;     // job index or -1
  std::vector<NodeId> pool_;   // idle nodes of the subset, in no particular order
  std::vector<int> pool_pos_;  // index in pool_, or -1
  int subset_size_ = 0;
  int used_ = 0;
  // Jobs.
  std::vector<int> queue_;        // job indices by (submit, index)
  std::size_t next_queued_ = 0;   // next job to admit
  std::size_t next_arrival_ = 0;  // next job to arrive (next_arrival_ >= next_queued_)
  // Samples done by jobs that have left active_ (finished: their `done` no longer changes), so
  // that a step's total is this plus the active jobs', not a sum over the whole workload.
  double retired_done_ = 0.0;
  std::vector<int> active_;  // admitted, unfinished, in admission order
  int finished_ = 0;
  int admitted_ = 0;
  // Accounting.
  double idle_node_s_ = 0.0;
  double used_node_s_ = 0.0;
  // The node-seconds so far at the first admission and at the latest finish (the active window).
  double first_admit_s_ = -1.0;
  double idle_at_first_admit_ = 0.0;
  double used_at_first_admit_ = 0.0;
  double last_finish_s_ = -1.0;
  double idle_at_last_finish_ = 0.0;
  double used_at_last_finish_ = 0.0;
  std::vector<double> allocator_times_;
  int allocator_time_limits_ = 0;
  int allocator_failures_ = 0;
  int total_rescales_ = 0;
  int total_preemptions_ = 0;
  double next_progress_ = 0.0;  // the next fraction of the window to report to on_progress
  // Allocator state reused between calls.
  alloc::SolveOptions solve_;  // opt_.solve, with reference accounting's equal-share rule
  // The policy's registration: the inputs it declares are what the replay supplies (Allocate).
  alloc::PolicyInfo policy_;
  alloc::Problem problem_;
  std::vector<alloc::Job> oracle_jobs_;
  // Learned mode: one profiling advisor per configuration index (0: full backpropagation; k: every
  // job's k-th configuration), each learning the curve of the jobs' runs in that configuration.
  std::vector<curve::ProfilingAdvisor> advisors_;
  // For a policy that reads expected idle times: the idle holes seen so far, and since when each
  // idle node is idle (-1: busy).
  std::unique_ptr<IdleLifetimePredictor> lifetime_;
  std::vector<double> idle_since_;
};

}  // namespace bft::sim::engine
