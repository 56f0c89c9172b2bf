// The replay's summary of a finished run (bft::sim::Summary; docs/sim.md for each figure).
#include <algorithm>
#include <cmath>

#include "engine.h"

namespace bft::sim::engine {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least q of the values at or below it.
  std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

void Engine::Summarize() {
  Summary& s = result_.summary;
  s.policy = opt_.solve.solver;
  s.curves = ToString(opt_.curves);
  s.accounting = ToString(opt_.accounting);
  s.configurations = ToString(opt_.configurations);
  s.start_s = start_;
  s.end_s = end_;
  s.nodes = subset_size_;
  s.events = static_cast<int>(result_.steps.size());
  double first_submit = kInf;
  double last_finish = -kInf;
  double turnaround = 0.0;
  result_.jobs.resize(specs_.size());
  for (std::size_t j = 0; j < specs_.size(); ++j) {
    const JobState& job = jobs_[j];
    const JobSpec& spec = specs_[j];
    JobResult& r = result_.jobs[j];
    r.name = spec.name;
    r.submit_s = spec.submit_s;
    r.admit_s = job.admit_s;
    r.finish_s = job.finish_s;
    r.work = spec.work;
    r.done = job.done;
    r.loss_samples = job.loss;
    r.unpaid_loss_samples = job.debt;
    r.allocator_scale_up_s = job.allocator_scale_up_s;
    r.allocator_scale_down_s = job.allocator_scale_down_s;
    r.rescales = job.rescales;
    r.preemptions = job.preemptions;
    r.node_seconds = job.node_seconds;
    r.configuration_switches = job.configuration_switches;
    r.partial_node_seconds = job.partial_node_seconds;
    s.configuration_switches += job.configuration_switches;
    s.partial_node_hours += job.partial_node_seconds / 3600.0;
    s.samples_done += job.done;
    s.samples_without_losses += job.gross;
    s.loss_samples += job.loss;
    s.unpaid_loss_samples += job.debt;
    if (spec.submit_s <= end_) {
      ++s.jobs_submitted;
      first_submit = std::min(first_submit, std::max(spec.submit_s, start_));
    }
    if (job.finish_s >= 0) {
      ++s.jobs_finished;
      last_finish = std::max(last_finish, job.finish_s);
      turnaround += job.finish_s - accounting_->TurnaroundOrigin(spec.submit_s, start_);
    }
  }
  s.jobs_admitted = admitted_;
  s.idle_node_hours = idle_node_s_ / 3600.0;
  s.used_node_hours = used_node_s_ / 3600.0;
  s.idle_capture = idle_node_s_ > 0 ? used_node_s_ / idle_node_s_ : 0.0;
  if (last_finish_s_ >= 0) {
    s.active_start_s = first_admit_s_;
    s.active_end_s = last_finish_s_;
    s.active_idle_node_hours = (idle_at_last_finish_ - idle_at_first_admit_) / 3600.0;
    s.active_used_node_hours = (used_at_last_finish_ - used_at_first_admit_) / 3600.0;
    s.active_idle_capture =
        s.active_idle_node_hours > 0 ? s.active_used_node_hours / s.active_idle_node_hours : 0.0;
  }
  // Every loss counts in full, paid or not: (gross - loss) / gross = (done - unpaid) / gross.
  s.overhead_efficiency =
      s.samples_without_losses > 0 ? 1.0 - s.loss_samples / s.samples_without_losses : 1.0;
  if (s.jobs_finished > 0) {
    s.makespan_s = last_finish - accounting_->MakespanOrigin(start_, first_submit);
    s.mean_turnaround_s = turnaround / s.jobs_finished;
  }
  s.rescales = total_rescales_;
  s.preemptions = total_preemptions_;
  s.allocator_calls = static_cast<int>(allocator_times_.size());
  for (const double x : allocator_times_) {
    s.allocator_total_s += x;
    s.allocator_max_s = std::max(s.allocator_max_s, x);
  }
  s.allocator_p50_s = Percentile(allocator_times_, 0.50);
  s.allocator_p99_s = Percentile(allocator_times_, 0.99);
  s.allocator_time_limits = allocator_time_limits_;
  s.allocator_failures = allocator_failures_;
}

}  // namespace bft::sim::engine
