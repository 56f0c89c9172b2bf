// bft::curve::ProfilingAdvisor — learns each job's throughput curve online from the job's own
// progress reports (MalleTrain's Job Profiling Advisor), so users need not measure it beforehand.
//
// Protocol. Report(job, time_s, nodes, cumulative_samples) says: at time_s the job has processed
// cumulative_samples since it started, and from time_s on it runs on `nodes` nodes (0 = stopped).
// The interval between two consecutive reports is attributed to the node count of the earlier one.
// A report whose node count differs from the previous one marks a rescale at that moment: the
// intervals that start within AdvisorOptions::warmup_s of it (and at least the first
// warmup_intervals of them) are warm-up and do not count toward the throughput estimate; the time
// they lost against the steady rate afterwards is the observed rescale overhead. A report that starts
// a rescale also says how it was done (RescaleMethod: a relaunch, the default, or in place): the
// costs of the two differ about tenfold, so they are measured and averaged apart.
//
// What the allocator gets: ThroughputEstimate() (best estimate: the fitted curve, or the optimistic
// prior for a job with little data) and ObjectiveCurve() (the estimate plus an exploration bonus
// proportional to its uncertainty, so the allocator tries sizes that are worth learning). A job the
// advisor knows nothing of gets the prior: linear scaling at prior_samples_per_node_s (or the
// per-job value given to SetPrior), so a new job still receives nodes; a job whose model is known
// (SetModel) starts from what other jobs of that model measured instead. ProbeSuggestions() lists
// node counts worth measuring next, for a caller that prefers explicit probe requests.
//
// Ageing: every interval's weight halves every half_life_s of wall time after it ended; and when
// drift_intervals consecutive steady intervals at one size deviate from the estimate there by more
// than drift_threshold (relative), the data older than the deviation is dropped at that size and
// discounted by drift_discount at every other size.
//
// State round-trips through Save()/Load() (a line-oriented text format, versioned).
// Details and defaults: docs/curve.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bft/curve.h"

namespace bft::curve {

// The advisor's fit options: FitOptions' defaults except the extrapolation, which counts the
// model's predicted gain in full up to 8x the largest measured size (FitOptions: half of it, up to
// 2x). The allocator only grows a job to a size its curve says is worth it, and growing is how the
// advisor measures larger sizes: a conservative curve kept jobs small and left idle nodes unused
// (docs/sim.md, "Where the learned samples go"), while an over-prediction is corrected at once by
// the rate the job then reports.
inline FitOptions AdvisorFitOptions() {
  FitOptions fit;
  fit.extrapolation_discount = 1.0;
  fit.extrapolation_limit = 8.0;
  return fit;
}

struct AdvisorOptions {
  double warmup_s = 30.0;           // intervals starting within this time after a rescale are warm-up
  int warmup_intervals = 1;         // ... and at least this many intervals after each rescale
  double half_life_s = 6 * 3600.0;  // weight of an interval halves every half_life_s (<= 0: never)
  double drift_threshold = 0.25;    // relative deviation that counts as drift
  int drift_intervals = 3;          // consecutive deviating intervals that confirm drift
  double drift_discount = 0.25;     // weight multiplier applied to other sizes' data on drift
  int max_intervals_per_size = 64;  // older intervals at one size are merged beyond this
  // Prior for a job without data: X(n) = prior_samples_per_node_s * n (linear scaling: optimistic).
  double prior_samples_per_node_s = 1000.0;
  // Relative standard deviation assumed for a size measured by a single interval, and the growth
  // of the relative uncertainty per doubling of distance from the nearest measured size.
  double single_interval_rel_sd = 0.1;
  double rel_sd_per_doubling = 0.1;
  // ObjectiveCurve(n) = ThroughputEstimate(n) * (1 + exploration_bonus * rel_sd(n)): an upper
  // confidence bound at exploration_bonus standard deviations. 0.5 was chosen by cross-validation
  // against 1 (docs/curve.md, "The rule").
  double exploration_bonus = 0.5;
  FitOptions fit = AdvisorFitOptions();  // how the curve is fitted from the per-size estimates
  bool IsValid(std::string* error) const;
};

// The steady-state throughput the advisor has measured at one node count.
struct SizeEstimate {
  int nodes = 0;
  double samples_per_s = 0.0;  // ageing-weighted mean rate of the steady intervals
  double rel_sd = 0.0;         // relative standard error of that mean
  double weight = 0.0;         // effective (aged) number of intervals
  double steady_s = 0.0;       // seconds of steady running behind the estimate (unaged)
  int intervals = 0;           // steady intervals kept
};

// How a rescale was done. kRelaunch: every process stopped and the job restarted at the new size
// (from its last checkpoint): the only method there was, so the default everywhere. kInPlace: the
// processes that stay keep running and re-form their process group, newcomers join them.
enum class RescaleMethod { kRelaunch, kInPlace };
inline constexpr RescaleMethod kRescaleMethods[] = {RescaleMethod::kRelaunch, RescaleMethod::kInPlace};
const char* ToString(RescaleMethod method);  // "relaunch", "inplace"
// Throws InvalidArgument naming the label and the valid ones.
RescaleMethod RescaleMethodFromString(const std::string& label);

// A rescale whose overhead was measured.
struct RescaleOverhead {
  double time_s = 0.0;  // when it happened
  int from_nodes = 0;
  int to_nodes = 0;
  double overhead_s = 0.0;    // seconds lost against the steady rate at to_nodes (>= 0)
  double lost_samples = 0.0;  // the same loss in samples: overhead_s x that rate
  RescaleMethod method = RescaleMethod::kRelaunch;
};

// The mean measured costs of one rescale method, in the allocator's units: it charges a rescale
// scale_*_s x the throughput at the old node count, so each rescale counts as lost_samples / the
// current estimate at from_nodes (not overhead_s, which is at the new rate). A start from 0 nodes
// is not a rescale.
struct RescaleCosts {
  RescaleMethod method = RescaleMethod::kRelaunch;
  double mean_scale_up_s = 0.0;    // 0 if none measured
  double mean_scale_down_s = 0.0;  // 0 if none measured
  int scale_ups = 0;               // grows measured
  int scale_downs = 0;             // shrinks measured
};

struct ProbeSuggestion {
  int nodes = 0;
  double predicted_samples_per_s = 0.0;
  double rel_sd = 0.0;  // current relative uncertainty at that size
  double score = 0.0;   // expected information value: predicted rate * rel_sd (higher first)
};

struct JobProfile {
  std::string job_id;
  int current_nodes = 0;
  double last_report_s = 0.0;
  double cumulative_samples = 0.0;
  std::vector<SizeEstimate> sizes;        // by increasing node count
  std::vector<RescaleOverhead> rescales;  // measured overheads, oldest first (at most 64 kept)
  // The measured mean costs of each method, one entry per method in kRescaleMethods' order (a
  // caller that names no method measures relaunches only).
  std::vector<RescaleCosts> costs;
  const RescaleCosts& MethodCosts(RescaleMethod method) const;  // the entry of `method`
  FitResult fit;                          // the curve fitted from `sizes` (status says if usable)
  bool has_prior = false;                 // SetPrior was called
  double prior_samples_per_node_s = 0.0;  // the prior in force
  std::string model;                      // SetModel ("" = none)
};

// What the allocator maximises for a job, in terms of the job's own throughput X (docs/curve.md,
// "Objectives"). kThroughput: X(n). kSpeedup: X(n) / X(1), relative to the job's own one-node
// rate, which is learned like the rest of its curve (the advisor's estimate at 1 node): a
// relative objective needs no number the job has not measured, so the replay and the runtime
// learn it as they learn throughput.
enum class Objective { kThroughput, kSpeedup };
const char* ToString(Objective objective);  // "throughput", "speedup"
// Throws InvalidArgument naming the label and the valid ones.
Objective ObjectiveFromString(const std::string& label);

// A job's curves for the allocator: `throughput` (its Job::throughput) and `objective` (its
// Job::objective: the throughput with the exploration bonus, in the units of the Objective asked
// for), on the same breakpoints.
struct AdvisorCurves {
  ThroughputCurve throughput;
  ThroughputCurve objective;
};

// The rescale costs an allocator should charge a job whose next rescale is done by `method`: the
// profile's measured mean costs of growing and of shrinking by that method (profile.MethodCosts(method)),
// each only once at least one such rescale was measured (a start from 0 nodes is not a rescale);
// until then the values passed in stay. The replay's learned mode and the runtime manager both use
// this rule.
void MeasuredRescaleCosts(const JobProfile& profile, double* scale_up_s, double* scale_down_s,
                          RescaleMethod method = RescaleMethod::kRelaunch);

// The largest values a progress report may carry (Report): rates and curves derived from them
// stay finite and within what the allocator accepts (a report of 1e308 samples was accepted and
// made the allocation fail later).
inline constexpr double kMaxReportedSamples = 1e18;
inline constexpr double kMaxReportTimeS = 1e12;

class ProfilingAdvisor {
 public:
  // Throws bft::InvalidArgument if the options are invalid.
  explicit ProfilingAdvisor(AdvisorOptions options = {});
  ~ProfilingAdvisor();
  ProfilingAdvisor(ProfilingAdvisor&&) noexcept;
  ProfilingAdvisor& operator=(ProfilingAdvisor&&) noexcept;
  ProfilingAdvisor(const ProfilingAdvisor&);
  ProfilingAdvisor& operator=(const ProfilingAdvisor&);

  const AdvisorOptions& options() const;

  // A progress report (see the protocol above). Throws bft::InvalidArgument, naming the job, for
  // an empty job id, a non-finite time, negative nodes, non-finite or negative samples, a time
  // beyond +-kMaxReportTimeS or samples above kMaxReportedSamples, time going backwards or
  // cumulative samples decreasing. A new job id starts a new job. `method`: how the rescale this
  // report starts (its node count differs from the previous report's) is done; none said: a
  // relaunch. At an unchanged node count, a method said while the latest rescale's overhead is still
  // being measured relabels that rescale (an in-place resize that failed and fell back to a
  // relaunch); otherwise it is ignored.
  void Report(const std::string& job_id, double time_s, int nodes, double cumulative_samples,
              std::optional<RescaleMethod> method = std::nullopt);
  // Per-job prior for a job with little data: linear scaling at samples_per_node_s (> 0).
  void SetPrior(const std::string& job_id, double samples_per_node_s);
  // Declares the job's model ("" = none; throws InvalidArgument for an empty job id). Jobs of one
  // model share what they measure: each size's latest steady estimate of any of them is kept for
  // the model (also after the job is forgotten), and a job with fewer than three measured sizes of
  // its own is estimated by the curve fitted through them, scaled by its own measurements, as
  // long as those agree with that curve's shape (docs/curve.md, "Model priors").
  void SetModel(const std::string& job_id, const std::string& model);

  // samples/s on 0..max_nodes: the fitted curve (extrapolated by options().fit, AdvisorFitOptions
  // by default), or the estimates and the prior while too few sizes were measured. Never empty for
  // max_nodes >= 1; an unknown job gets the prior. Throws InvalidArgument if max_nodes < 1.
  // Sparse breakpoints (docs/curve.md, "Curves for the allocator"): 0; 1, 2, 3, 4, 6, 8, 12, ...
  // (powers of two and three times powers of two) up to max_nodes; max_nodes; every measured size
  // and the extrapolation cap (extrapolation_limit x the largest measured size) within 1..max_nodes.
  // At each breakpoint the value is the advisor's estimate there; between them the curve is linear.
  // So a curve has O(log max_nodes) breakpoints, whatever max_nodes is.
  ThroughputCurve ThroughputEstimate(const std::string& job_id, int max_nodes) const;
  // ThroughputEstimate plus the exploration bonus (see AdvisorOptions::exploration_bonus), on the
  // same breakpoints, in `objective`'s units (kSpeedup: divided by ThroughputEstimate at 1 node).
  ThroughputCurve ObjectiveCurve(const std::string& job_id, int max_nodes,
                                 Objective objective = Objective::kThroughput) const;
  // Both at once (one pass; what an allocator needs per job and event): equal to
  // {ThroughputEstimate(job_id, max_nodes), ObjectiveCurve(job_id, max_nodes, objective)}.
  AdvisorCurves Curves(const std::string& job_id, int max_nodes,
                       Objective objective = Objective::kThroughput) const;
  // Relative uncertainty of ThroughputEstimate at n (n >= 1).
  double RelativeUncertainty(const std::string& job_id, int n) const;
  // Up to max_suggestions unmeasured node counts in 1..max_nodes worth probing, best first.
  std::vector<ProbeSuggestion> ProbeSuggestions(const std::string& job_id, int max_nodes,
                                                int max_suggestions = 3) const;

  // Everything known about a job; throws InvalidArgument for an unknown job.
  JobProfile Profile(const std::string& job_id) const;
  bool HasJob(const std::string& job_id) const;
  std::vector<std::string> Jobs() const;   // sorted
  void Forget(const std::string& job_id);  // no-op for an unknown job

  // The whole state (options included) as text; Load throws bft::ParseError ("advisor state:line")
  // on malformed input.
  std::string Save() const;
  static ProfilingAdvisor Load(const std::string& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bft::curve
