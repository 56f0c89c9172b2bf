// The two accounting models of the replay (docs/sim.md, "Accounting").
#include <algorithm>

#include "engine.h"

namespace bft::sim::engine {
namespace {

// Ours: events at trace transitions, arrivals and finishes in [start, end); a job finishes exactly
// when its work is done; a loss larger than the samples done is a debt that later progress pays.
class ContinuousAccounting final : public AccountingModel {
 public:
  bool CountsNodesAbsentFromTrace() const override { return false; }
  double WindowStart(const Trace&, const ReplayOptions& options) const override {
    return options.start_s.value_or(0.0);
  }
  bool AppliedBeforeStart(double time_s, double start_s) const override { return time_s < start_s; }
  void Adjust(alloc::SolveOptions*) const override {}
  void Progress(JobState& job, const JobSpec& spec, double dt, double t) const override {
    if (job.finish_at <= t + kTimeEps) {
      job.gross += spec.work - job.done + job.debt;
      job.done = spec.work;
      job.debt = 0.0;
      job.phase = JobState::Phase::kFinished;
    } else if (dt > 0) {
      const double progress = job.rate * dt;
      job.gross += progress;
      const double paid = std::min(job.debt, progress);
      job.debt -= paid;
      job.done = std::min(spec.work, job.done + (progress - paid));
    }
  }
  void Settle(JobState&, const JobSpec&) const override {}  // Progress finished it already
  double TurnaroundOrigin(double submit_s, double start_s) const override {
    return std::max(submit_s, start_s);
  }
  double MakespanOrigin(double, double first_submit_s) const override { return first_submit_s; }
  void RunEvents(Engine& engine) const override { engine.RunContinuous(); }

 private:
  // Out of the samples done as far as they go, the rest as a debt that the job's next progress pays
  // first (so the total taken equals the allocator's penalty).
  void Take(JobState& job, double samples) const override {
    const double now = std::min(samples, job.done);
    job.done -= now;
    job.debt += samples - now;
    job.loss += samples;
  }
};

// The published BFTrainer replayer's: the window starts at the trace's kReferenceStartEvent-th
// distinct time (transitions up to and including it applied), one event per distinct transition
// time; progress is not capped at the work, and what a job made beyond its work when it finishes
// is a loss; losses come out of the samples done, which may go below zero; the allocator shares
// nodes above the minimums equally.
class ReferenceAccounting final : public AccountingModel {
 public:
  bool CountsNodesAbsentFromTrace() const override { return true; }
  double WindowStart(const Trace& trace, const ReplayOptions& options) const override {
    if (options.start_s) return *options.start_s;
    int distinct = 0;
    const std::optional<std::int64_t> start = ReferenceStartS(trace, &distinct);
    if (!start) {
      throw InvalidArgument(
          "accounting reference: the window starts at the trace's " + std::to_string(kReferenceStartEvent) +
          "th distinct time, but the trace has only " + std::to_string(distinct) + " (give start_s)");
    }
    return static_cast<double>(*start);
  }
  bool AppliedBeforeStart(double time_s, double start_s) const override { return time_s <= start_s; }
  void Adjust(alloc::SolveOptions* solve) const override { solve->equal_share_above_min = true; }
  void Progress(JobState& job, const JobSpec&, double dt, double) const override {
    const double progress = job.rate * std::max(dt, 0.0);
    job.gross += progress;
    job.done += progress;
  }
  void Settle(JobState& job, const JobSpec& spec) const override {
    if (job.done < spec.work) return;
    job.phase = JobState::Phase::kFinished;
    job.loss += job.done - spec.work;
    job.done = spec.work;
  }
  double TurnaroundOrigin(double submit_s, double) const override { return submit_s; }
  double MakespanOrigin(double start_s, double) const override { return start_s; }
  void RunEvents(Engine& engine) const override { engine.RunReference(); }

 private:
  void Take(JobState& job, double samples) const override {
    job.done -= samples;
    job.loss += samples;
  }
};

}  // namespace

std::unique_ptr<const AccountingModel> MakeAccountingModel(Accounting accounting) {
  if (accounting == Accounting::kReference) return std::make_unique<ReferenceAccounting>();
  return std::make_unique<ContinuousAccounting>();
}

}  // namespace bft::sim::engine
