// bft::sim — replay an idle-node trace with a queue of elastic training jobs (BFTrainer's
// evaluation): the trace says when the main scheduler leaves nodes idle and when it reclaims them;
// on every event an allocator of bft::alloc decides which idle nodes each admitted job runs on,
// and the replay accounts the samples each job processes, the rescale and preemption losses, and
// the idle node-hours captured.
//
// Accounting (continuous, the default; Accounting::kReference reproduces the published replayer's,
// and docs/sim.md sets the two side by side):
// - between events a job on n nodes makes throughput(n) * dt samples of progress;
// - when the allocator grows (shrinks) a running job, it loses scale_up_s (scale_down_s) times
//   its rate before the change, as in the allocator's penalty;
// - when the main scheduler reclaims any node of a job, the job loses scale_down_s times its rate
//   before the event, once per job per event;
// - losses are charged in full: out of the job's completed samples as far as they go (never below
//   zero), the rest as a debt the job's next progress pays first;
// - a job finishes when its `work` is done; a finish between trace events is an event of its own;
// - jobs are admitted first come first served, at most max_jobs at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bft/alloc.h"
#include "bft/curve.h"
#include "bft/error.h"
#include "bft/jobs.h"
#include "bft/profiling.h"

namespace bft::sim {

using NodeId = alloc::NodeId;

enum class NodeState { kBusy = 0, kIdle = 1 };
const char* ToString(NodeState state);  // "busy", "idle"

// One line of a trace: from time_s on, `node` is idle (free for training) or busy (taken back).
struct Transition {
  std::int64_t time_s = 0;
  NodeId node = 0;
  NodeState state = NodeState::kBusy;
};

// An idle-node trace. Node names map to NodeIds 0, 1, ... in order of first appearance. Every
// node is busy before its first transition; its transitions alternate idle, busy, idle, ...
struct Trace {
  std::vector<std::string> node_names;  // NodeId -> name
  std::vector<Transition> transitions;  // time non-decreasing; a node at most once per second

  std::int64_t first_time_s() const { return transitions.empty() ? 0 : transitions.front().time_s; }
  std::int64_t last_time_s() const { return transitions.empty() ? 0 : transitions.back().time_s; }
  // The NodeId of a name, or -1 if the trace has no such node.
  NodeId FindNode(const std::string& name) const;
  // True if valid (the rules above); else false with the offending transition in *error.
  bool IsValid(std::string* error) const;
};

// Reads a `time,node,state` CSV file, plain or gzip-compressed (detected from its content).
// Throws FileNotFound if it cannot be opened, ParseError ("path:line: ...") on any bad line.
Trace ReadTrace(const std::string& path);
// The same from text in memory; `source` names it in error messages.
Trace ParseTrace(const std::string& text, const std::string& source = "<trace>");
// Writes the CSV format ReadTrace reads; gzip-compressed if the path ends in ".gz".
void WriteTrace(const Trace& trace, const std::string& path);

// What a trace offers training (`bft trace stats`): how many nodes are idle over time and how long
// idle holes last, so a centre sees whether its holes are worth harvesting. Time-weighted figures
// cover [start_s, end_s], the first and last transitions.
struct TraceStats {
  std::int64_t nodes = 0;        // nodes the trace names
  std::int64_t transitions = 0;  // lines
  std::int64_t start_s = 0;
  std::int64_t end_s = 0;
  // Idle nodes, weighted by the time each count lasts: the mean; time-weighted percentiles (the
  // smallest count c such that the trace spends at least 50 / 90 / 99 % of its time with c or
  // fewer idle nodes); the maximum.
  double mean_idle_nodes = 0.0;
  std::int64_t p50_idle_nodes = 0;
  std::int64_t p90_idle_nodes = 0;
  std::int64_t p99_idle_nodes = 0;
  std::int64_t max_idle_nodes = 0;
  double idle_node_s = 0.0;  // node-seconds idle within [start_s, end_s]
  // Idle holes, one per idle -> busy pair of a node, sorted by length; a node still idle at end_s
  // has a hole of unknown length, counted apart.
  std::vector<double> hole_lengths_s;
  std::int64_t holes_open_at_end = 0;
  double events_per_hour = 0.0;  // distinct transition times per hour of [start_s, end_s]
  // The idle-node count from each distinct transition time on (a step function, for plots).
  std::vector<std::int64_t> step_time_s;
  std::vector<std::int64_t> step_idle_nodes;
};
// Throws InvalidArgument naming the transition if the trace is not valid (Trace::IsValid).
TraceStats ComputeTraceStats(const Trace& trace);

// Importers: a centre's own scheduler log as an idle-node trace (docs/trace.md). A node of the
// machine is busy while a job of the log runs on it and idle otherwise; time 0 of the trace is the
// start of the imported window. Every line is checked: a bad one is a ParseError naming file:line.
// A node that is busy over the whole window never changes state, so the trace does not name it.
// More nodes than any machine has (Fugaku: 158,976): a typo such as c[0-99999999], not a machine.
inline constexpr std::size_t kMaxMachineNodes = 1'000'000;
// The most transitions an import makes (node busy/idle changes, counted before they are merged):
// about twelve months of Summit (4,680 nodes, 846,856 transitions in February 2021), under 1 GB.
// Small inputs can multiply past it (20 jobs on a million nodes each); the importer refuses them
// before it holds them all, naming the cap.
inline constexpr std::size_t kMaxImportTransitions = 10'000'000;

struct ImportedTrace {
  Trace trace;
  std::int64_t machine_nodes = 0;  // nodes of the machine (the trace names only those ever idle)
  std::int64_t origin_s = 0;       // time 0 of the trace on the log's clock
  std::int64_t end_s = 0;          // end of the imported window on the log's clock
  std::int64_t jobs_used = 0;      // jobs that ran on the machine's nodes within the window
  std::int64_t jobs_skipped = 0;   // jobs that never ran in the window (never started, no run time, outside)
  // Nodes that jobs of the log ran on but that are not in the machine's node list (ignored: a log
  // of the whole centre imported for one partition), at most 10 of them named in `ignored_examples`.
  std::int64_t ignored_nodes = 0;
  std::vector<std::string> ignored_examples;
};

// Expands a Slurm hostlist expression: "c[01-03,07],gpu5" gives c01 c02 c03 c07 gpu5; brackets
// may follow each other ("r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2); a range keeps the zero padding
// of its first bound. Throws InvalidArgument naming the expression (unbalanced brackets, a range
// that runs backwards, more than `max_names` names or 64 MiB of them). The names are counted before
// any is made, so a typo costs no memory.
std::vector<std::string> ExpandHostlist(const std::string& expression,
                                        std::size_t max_names = kMaxMachineNodes);

// A time as sacct prints it: Unix seconds (with SLURM_TIME_FORMAT=%s) or YYYY-MM-DDTHH:MM:SS
// (sacct's default; read as UTC, so a daylight-saving change inside the window shifts what follows
// it by an hour: prefer %s). Throws InvalidArgument.
std::int64_t ParseSacctTime(const std::string& text);

struct SacctImportOptions {
  std::vector<std::string> machine_nodes;  // every node of the machine (or partition), by name
  // The window on the log's clock: default from the earliest job start to the latest job end (or
  // start, for jobs still running). Jobs running at the start hold their nodes from the start on;
  // jobs still running at the end (End "Unknown", or later) keep theirs to the end; starts and
  // ends at the end are applied.
  std::optional<std::int64_t> start_s;
  std::optional<std::int64_t> end_s;

  // True if valid (machine_nodes non-empty, at most 1,000,000 valid and distinct names; end_s after
  // start_s); else false with the offending field in *error.
  bool IsValid(std::string* error) const;
};
// Reads `sacct --parsable2` output (docs/trace.md has the command): a header line naming at least
// the columns Start, End and NodeList ("|"-separated; JobID, if present, names jobs in messages),
// then one line per job. Job steps (a JobID with a '.') are skipped: they run inside their job's
// allocation. Plain or gzip.
ImportedTrace ImportSacct(const std::string& path, const SacctImportOptions& options);

// One job line of a `sacct --parsable2` log, as ForEachSacctJob gives it.
struct SacctJobLine {
  long line = 0;                    // its number in the file
  std::vector<std::string> fields;  // the columns asked for, in the order asked ("" for one the header lacks)
  std::vector<std::string> nodes;   // NodeList expanded (empty: "None assigned" or empty)
};
// The one reader of sacct's line format (ImportSacct and `bft report --sacct` both use it): a header
// naming `columns` (each at most once; those in `optional` may be missing, the rest are required),
// then one "|"-separated line per job; steps (a JobID with a '.') are skipped, empty lines too. The
// NodeList column (which `columns` must name) is expanded; the names of the whole file are counted
// before each line's are made, and more than `max_names` in all is a ParseError naming that line.
// Errors name file:line (and the job, by JobID when the header has it). Plain or gzip.
void ForEachSacctJob(const std::string& path, const std::vector<std::string>& columns,
                     const std::vector<std::string>& optional, std::uint64_t max_names,
                     const std::function<void(SacctJobLine&)>& f);

struct SwfImportOptions {
  int procs_per_node = 0;  // processors of one node (required, >= 1)
  // Nodes of the machine; 0: from the log's header comments (MaxNodes, else MaxProcs divided by
  // procs_per_node, rounded up).
  int machine_nodes = 0;

  // True if valid (procs_per_node >= 1, machine_nodes >= 0); else false with the field in *error.
  bool IsValid(std::string* error) const;
};
// Reads a Standard Workload Format log (18 numeric fields per line, ';' comments) at count level:
// a job takes ceil(processors / procs_per_node) whole nodes from its start (submit + wait) for its
// run time; nodes are named n0, n1, ... (zero-padded) and each job takes the lowest-numbered free
// ones, so the same log always gives the same trace. Jobs with an unknown wait or no run time are
// skipped. A job that needs more nodes than are free is an error naming its line. Plain or gzip.
ImportedTrace ImportSwf(const std::string& path, const SwfImportOptions& options);

// How long an idle node will stay idle, predicted online from the idle holes seen so far (no
// look-ahead): the mean residual life E[H - age | H > age] over the lengths H of the holes that have
// ended, kept in a histogram of 20 logarithmic bins per decade (1 s to 10^8 s), so that a prediction
// costs O(1) after each new hole and memory stays constant over a whole trace. What the replay
// gives the policies that read expected idle times (alloc::PolicyInput::kExpectedIdleS: lifetime_aware).
class IdleLifetimePredictor {
 public:
  // Until `min_holes` holes have ended, every prediction is `prior_s`.
  explicit IdleLifetimePredictor(double prior_s = 1200.0, int min_holes = 50);
  void ObserveHole(double length_s);
  // Seconds a node idle for `age_s` is expected to stay idle (>= 1). A node idle longer than any
  // hole seen is expected to stay as long again as it has been (heavy tails).
  double ExpectedRemaining(double age_s);
  std::int64_t holes() const { return holes_; }

 private:
  static constexpr int kBinsPerDecade = 20;
  static constexpr int kBins = 8 * kBinsPerDecade;
  static int Bin(double seconds);
  double prior_s_;
  int min_holes_;
  std::int64_t holes_ = 0;
  std::vector<double> count_ = std::vector<double>(kBins, 0.0);
  std::vector<double> sum_ = std::vector<double>(kBins, 0.0);
  // Suffix sums of count_ and sum_ (holes in bins >= b), rebuilt lazily after new holes.
  bool stale_ = true;
  std::vector<double> count_from_ = std::vector<double>(kBins + 1, 0.0);
  std::vector<double> sum_from_ = std::vector<double>(kBins + 1, 0.0);
};

// The job format lives in bft::jobs (beneath the allocator and the replay); its names here are the
// same types and functions.
using jobs::JobSpec;
using jobs::ParseJobs;
using jobs::ReadJobs;
using jobs::WriteJobs;

enum class CurveMode {
  kOracle,   // the allocator sees each job's objective and throughput curves from the workload
  kLearned,  // the allocator sees curves the profiling advisor learns from the simulated progress
  // Diagnostic halves of kLearned (docs/sim.md, "Where the learned samples go"): the advisor
  // learns as in kLearned, but the allocator gets only its curves (the rescale costs stay the
  // workload's), or only its rescale costs (the curves stay the workload's).
  kLearnedCurves,
  kLearnedCosts,
};
const char* ToString(CurveMode mode);               // "oracle", "learned", "learned_curves", "learned_costs"
CurveMode CurveModeFromString(const std::string&);  // throws InvalidArgument

// How the replay accounts time and progress (docs/sim.md sets the two side by side).
enum class Accounting {
  // libbft's (the default): every trace event, job arrival and job finish is an event at its exact
  // time; the window is [start_s, end_s]; losses are charged in full (a loss larger than the samples
  // done is a debt that later progress pays).
  kContinuous,
  // The published BFTrainer replayer's: the window starts at the trace's kReferenceStartEvent-th
  // distinct time (the state after it is the initial one) and stops when every job is finished or
  // at the end of the trace; decisions only at the times at which the replayed nodes change state
  // (arrivals wait for the next one, a finished job keeps its nodes until it); progress is not
  // capped at the work: a job finishes at the first event at which its samples done, net of every
  // charge so far (that event's preemption charges included), reach its work, and what it made
  // beyond its work is a loss; losses are taken in full out of the samples done, which may go
  // below zero; equal share gives a job its share only if it exceeds min_nodes
  // (alloc::SolveOptions::equal_share_above_min); subset nodes absent from the trace are allowed
  // (always busy).
  kReference,
};
const char* ToString(Accounting accounting);               // "continuous", "reference"
Accounting AccountingFromString(const std::string& name);  // throws InvalidArgument

// Which of a job's configurations (JobSpec::configurations) the allocator may choose.
enum class ConfigurationMode {
  kChoose,    // every configuration the job declares (the default)
  kFullOnly,  // full backpropagation only: the plain policy, to compare with
};
const char* ToString(ConfigurationMode mode);                       // "choose", "full"
ConfigurationMode ConfigurationModeFromString(const std::string&);  // throws InvalidArgument
inline constexpr int kReferenceStartEvent = 1000;
// Where the reference accounting's window starts when no start_s is given: the trace's
// kReferenceStartEvent-th distinct transition time; none if the trace has fewer, their number then
// in *distinct_times (a replay throws InvalidArgument asking for start_s; bft replay checks it
// before any replay runs).
std::optional<std::int64_t> ReferenceStartS(const Trace& trace, int* distinct_times = nullptr);

// The MILP options a replay uses unless told otherwise: a time limit per allocation (a MILP
// allocation that hits it keeps its incumbent or, without one, every job's nodes; the summary counts
// them), and isolated solves, so that a crash in a solver library ends one allocation, not the replay.
inline constexpr double kDefaultReplayMilpTimeLimitS = 10.0;
inline alloc::SolveOptions DefaultReplaySolveOptions() {
  alloc::SolveOptions options;
  options.milp.time_limit_s = kDefaultReplayMilpTimeLimitS;
  options.milp.isolate = true;
  return options;
}

struct ReplayOptions {
  // The policy: its name (exact by default), goal, MILP options (DefaultReplaySolveOptions).
  // solve.milp.interrupt, if set, is also polled between events: true stops the replay with
  // bft::Interrupted.
  alloc::SolveOptions solve = DefaultReplaySolveOptions();
  CurveMode curves = CurveMode::kOracle;
  Accounting accounting = Accounting::kContinuous;
  ConfigurationMode configurations = ConfigurationMode::kChoose;
  curve::AdvisorOptions advisor;  // the profiling advisor of learned mode (docs/curve.md)
  // Learned modes: empty, or each job's model in workload order ("" = none). Jobs of one model
  // share what they measured (curve::ProfilingAdvisor::SetModel): a newly admitted job starts from
  // its siblings' curve.
  std::vector<std::string> models;
  int max_jobs = 10;                     // at most this many admitted (unfinished) jobs at once
  double tfwd_s = alloc::kDefaultTfwdS;  // the allocator's forward-looking horizon
  // Only these nodes (names from the trace; in reference accounting also names absent from it,
  // always busy) are offered to the jobs; empty: every node of the trace.
  std::vector<std::string> nodes;
  // The replayed window, on the trace's clock. Transitions before start_s (reference: up to and
  // including start_s) set the state at start_s; jobs submitted before start_s are queued at
  // start_s. Defaults: continuous, 0 and the last transition of the trace; reference, the
  // kReferenceStartEvent-th distinct time and the last transition.
  std::optional<double> start_s;
  std::optional<double> end_s;
  bool record_job_progress = true;  // ReplayResult::progress
  bool record_assignments = false;  // ReplayResult::assignments (large on long traces)
  // Called now and then with the fraction of the window replayed (0..1), from the calling thread.
  // An exception thrown by it stops the replay and propagates.
  std::function<void(double)> on_progress;

  bool IsValid(std::string* error) const;
};

// One row of the step log: the state right after an event has been handled.
struct Step {
  double time_s = 0.0;
  int transitions = 0;        // node transitions of the trace at this time (within the node subset)
  int idle_nodes = 0;         // nodes idle now (within the subset)
  int used_nodes = 0;         // nodes running a job now
  int running_jobs = 0;       // admitted jobs with nodes
  int active_jobs = 0;        // admitted and unfinished jobs
  int queued_jobs = 0;        // submitted, waiting for admission
  int finished_jobs = 0;      // finished so far
  int rescales = 0;           // running jobs grown or shrunk by the allocator at this event
  int preemptions = 0;        // jobs that lost nodes to the main scheduler at this event
  double samples_done = 0.0;  // all jobs, cumulative, net of losses
  double rate = 0.0;          // samples/s of all jobs until the next event
  double allocator_s = 0.0;   // wall time of the allocator call (0 if not called)
};

// One point of a job's progress curve, recorded at every event where the job is admitted.
struct JobProgress {
  double time_s = 0.0;
  int job = 0;  // index into the workload
  double done = 0.0;
  int nodes = 0;
  double rate = 0.0;  // true samples/s (of `work`) from now on
  // Learned modes: what the job's advisor estimates `rate` to be (its throughput estimate at
  // `nodes` in the job's configuration, times the configuration's efficiency); 0 in oracle mode.
  double estimate = 0.0;
};

// A change of the node -> job map (record_assignments): `node` starts running job `job`, or
// stops running it (job -1 means the node is free from time_s on).
struct AssignmentChange {
  double time_s = 0.0;
  NodeId node = 0;
  int job = -1;
};

struct JobResult {
  std::string name;
  double submit_s = 0.0;
  double admit_s = -1.0;   // -1: never admitted
  double finish_s = -1.0;  // -1: not finished in the window
  double work = 0.0;
  double done = 0.0;  // net of losses; == work if finished (reference: may be < 0)
  // Rescale and preemption losses charged, in full (reference: and the progress beyond the work).
  double loss_samples = 0.0;
  double unpaid_loss_samples = 0.0;  // the part of loss_samples still owed at the end (0 if finished)
  int rescales = 0;
  int preemptions = 0;
  double node_seconds = 0.0;
  // Changes of configuration while running (each charged as a rescale), and the node-seconds spent
  // in a configuration other than full backpropagation.
  int configuration_switches = 0;
  double partial_node_seconds = 0.0;
  // The rescale costs the allocator was last given for the job: the spec's in oracle mode; in
  // learned mode the advisor's measured means (JobProfile) once measured, the spec's until then.
  double allocator_scale_up_s = 0.0;
  double allocator_scale_down_s = 0.0;
};

struct Summary {
  std::string policy;      // options.solve.solver
  std::string curves;      // ToString(options.curves)
  std::string accounting;  // ToString(options.accounting)
  double start_s = 0.0;
  double end_s = 0.0;
  int nodes = 0;   // nodes in the replayed subset
  int events = 0;  // rows of the step log
  double samples_done = 0.0;
  // What the same allocations would have done with no rescale or preemption loss (reference: not
  // capped at a job's work, up to the event that notices its finish).
  double samples_without_losses = 0.0;
  double loss_samples = 0.0;         // as JobResult::loss_samples, over all jobs
  double unpaid_loss_samples = 0.0;  // the part of loss_samples jobs still owed at the end
  double idle_node_hours = 0.0;
  double used_node_hours = 0.0;
  double idle_capture = 0.0;  // used / idle node-hours
  // The same over the active window, from the first admission to the last finish (0 if no job
  // finished): the part of the trace the jobs could have used.
  double active_start_s = 0.0;
  double active_end_s = 0.0;
  double active_idle_node_hours = 0.0;
  double active_used_node_hours = 0.0;
  double active_idle_capture = 0.0;
  // 1 - loss_samples / samples_without_losses (1 if nothing was done): samples_done /
  // samples_without_losses when no loss is unpaid, below it otherwise (negative if the losses
  // exceed all progress, as in a window that ends right after a preemption).
  double overhead_efficiency = 0.0;
  int jobs_submitted = 0;  // submitted before the end of the window
  int jobs_admitted = 0;
  int jobs_finished = 0;
  // Over finished jobs. Continuous: last finish - first submit, and the mean of finish - submit,
  // submits clamped to the window's start. Reference: last finish - window start, and the mean of
  // finish - submit.
  double makespan_s = 0.0;
  double mean_turnaround_s = 0.0;
  int rescales = 0;
  int preemptions = 0;
  std::string configurations;       // ToString(options.configurations)
  int configuration_switches = 0;   // running jobs that changed configuration (JobResult)
  double partial_node_hours = 0.0;  // node-hours in a configuration other than full backpropagation
  int allocator_calls = 0;
  double allocator_p50_s = 0.0;
  double allocator_p99_s = 0.0;
  double allocator_max_s = 0.0;
  double allocator_total_s = 0.0;
  // MILP allocations that stopped at the time limit (keeping their incumbent, or every job's nodes
  // without one), and those that ended with no solution for another reason (a solver error or crash).
  int allocator_time_limits = 0;
  int allocator_failures = 0;
  double wall_s = 0.0;  // the whole replay
};

struct ReplayResult {
  Summary summary;
  std::vector<Step> steps;
  std::vector<JobResult> jobs;                // in workload order
  std::vector<JobProgress> progress;          // if record_job_progress
  std::vector<AssignmentChange> assignments;  // if record_assignments
};

// Replays the trace with the workload under one policy. Throws InvalidArgument if the options are
// invalid or name unknown nodes, Interrupted if solve.milp.interrupt asked to stop, and whatever the
// allocator throws (NotAvailable for a missing MILP backend). Jobs are checked with JobSpec::IsValid, the
// trace with Trace::IsValid.
ReplayResult Replay(const Trace& trace, const std::vector<JobSpec>& jobs, const ReplayOptions& options);

// The synthetic idle-node trace and job mix of the embedded default (docs/sim.md describes the
// model). Same options and seed, same output, on every platform.
struct SyntheticOptions {
  std::uint64_t seed = 1;
  int nodes = 512;
  double duration_s = 2.0 * 86400.0;
  double mean_idle_nodes = 96.0;  // target time-average of idle nodes
  double mean_block_nodes = 8.0;  // mean size of a block of nodes freed together
  double median_idle_s = 1800.0;  // median idle period of a block (lognormal)
  double idle_sigma = 1.2;        // log-standard deviation of the idle period
  int jobs = 48;
  double mean_interarrival_s = 3600.0;  // jobs arrive as a Poisson process from time 0
  bool IsValid(std::string* error) const;
};

struct SyntheticWorkload {
  Trace trace;
  std::vector<JobSpec> jobs;
};

SyntheticWorkload GenerateSynthetic(const SyntheticOptions& options = {});

}  // namespace bft::sim
