// The event-driven replay engine (see bft/sim.h and docs/sim.md for the accounting).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "engine.h"

namespace bft::sim::engine {
namespace {

double Efficiency(const JobSpec& spec, int configuration) {
  return configuration == 0 ? 1.0
                            : spec.configurations[static_cast<std::size_t>(configuration - 1)].efficiency;
}

// A job's progress rate on n nodes in a configuration, in samples at full backpropagation per
// second: the allocator's definition (bft::alloc's Prepare/Score): efficiency times the curve at n,
// unclamped, and 0 below min_nodes (a job below its minimum is not running).
double RateAt(const JobSpec& spec, int configuration, int n) {
  if (n < spec.min_nodes) return 0.0;
  const curve::ThroughputCurve& curve =
      configuration == 0 ? spec.throughput
                         : spec.configurations[static_cast<std::size_t>(configuration - 1)].throughput;
  return Efficiency(spec, configuration) * curve.Evaluate(static_cast<double>(n));
}

// The allocator's view of a job: the spec's bounds and weight with the given curves and rescale
// costs (the spec's own in oracle mode, the advisor's in learned mode).
alloc::Job ToAllocJob(const JobSpec& spec, curve::ThroughputCurve objective,
                      curve::ThroughputCurve throughput, double scale_up_s, double scale_down_s) {
  alloc::Job job = alloc::FromJobSpec(spec);
  job.objective = std::move(objective);
  job.throughput = std::move(throughput);
  job.scale_up_s = scale_up_s;
  job.scale_down_s = scale_down_s;
  return job;
}

}  // namespace

void Engine::SetupNodes() {
  const std::size_t n = trace_.node_names.size();
  in_subset_.assign(n, opt_.nodes.empty() ? 1 : 0);
  if (!opt_.nodes.empty()) {
    std::unordered_map<std::string, NodeId> ids;
    ids.reserve(n);
    for (std::size_t i = 0; i < n; ++i) ids.emplace(trace_.node_names[i], static_cast<NodeId>(i));
    std::unordered_set<std::string> absent;  // nodes never idle in the trace
    for (const std::string& name : opt_.nodes) {
      auto it = ids.find(name);
      if (it == ids.end()) {
        if (!accounting_->CountsNodesAbsentFromTrace())
          throw InvalidArgument("nodes: node \"" + name + "\" is not in the trace");
        if (!absent.insert(name).second)
          throw InvalidArgument("nodes: node \"" + name + "\" is listed twice");
        continue;
      }
      char& flag = in_subset_[static_cast<std::size_t>(it->second)];
      if (flag) throw InvalidArgument("nodes: node \"" + name + "\" is listed twice");
      flag = 1;
    }
    subset_size_ = static_cast<int>(absent.size());
  }
  subset_size_ += static_cast<int>(std::count(in_subset_.begin(), in_subset_.end(), 1));
  idle_.assign(n, 0);
  owner_.assign(n, -1);
  pool_pos_.assign(n, -1);
  pool_.clear();
  pool_.reserve(n);
}

void Engine::AddIdle(NodeId node) {
  const auto i = static_cast<std::size_t>(node);
  idle_[i] = 1;
  pool_pos_[i] = static_cast<int>(pool_.size());
  pool_.push_back(node);
}

// Expected idle times: a node going busy ends an idle hole the predictor learns from.
void Engine::ObserveLifetime(const Transition& x) {
  if (!lifetime_) return;
  double& since = idle_since_[static_cast<std::size_t>(x.node)];
  if (x.state == NodeState::kIdle) {
    since = static_cast<double>(x.time_s);
  } else if (since >= 0.0) {
    lifetime_->ObserveHole(static_cast<double>(x.time_s) - since);
    since = -1.0;
  }
}

void Engine::RemoveIdle(NodeId node) {
  const auto i = static_cast<std::size_t>(node);
  idle_[i] = 0;
  const int pos = pool_pos_[i];
  const NodeId last = pool_.back();
  pool_[static_cast<std::size_t>(pos)] = last;
  pool_pos_[static_cast<std::size_t>(last)] = pos;
  pool_.pop_back();
  pool_pos_[i] = -1;
}

double Engine::NextFinish() const {
  double t = kInf;
  for (const int j : active_) t = std::min(t, jobs_[static_cast<std::size_t>(j)].finish_at);
  return t;
}

// Moves the clock to t: node-seconds, and progress at the rates set at the last event as the
// accounting model counts it (continuous: a job whose finish time is reached gets exactly its work;
// reference: not capped at the work, settled in RetireFinished after the event's charges).
void Engine::Advance(double t) {
  const double dt = t - now_;
  if (dt > 0) {
    idle_node_s_ += static_cast<double>(pool_.size()) * dt;
    used_node_s_ += static_cast<double>(used_) * dt;
  }
  for (const int j : active_) {
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    job.node_seconds += static_cast<double>(job.nodes.size()) * std::max(dt, 0.0);
    if (job.configuration != 0)
      job.partial_node_seconds += static_cast<double>(job.nodes.size()) * std::max(dt, 0.0);
    if (job.rate > 0.0) accounting_->Progress(job, spec, dt, t);
  }
  now_ = t;
}

// Finished jobs leave and free their nodes (the accounting model settles each active job first).
void Engine::RetireFinished(double t) {
  bool any_finished = false;
  for (const int j : active_) {
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    accounting_->Settle(job, specs_[static_cast<std::size_t>(j)]);
    if (job.phase != JobState::Phase::kFinished) continue;
    any_finished = true;
    job.finish_s = t;
    ++finished_;
    retired_done_ += job.done;
    if (opt_.record_job_progress) result_.progress.push_back({t, j, job.done, 0});
    for (const NodeId node : job.nodes) {
      owner_[static_cast<std::size_t>(node)] = -1;
      if (opt_.record_assignments) result_.assignments.push_back({t, node, -1});
    }
    used_ -= static_cast<int>(job.nodes.size());
    job.nodes.clear();
    job.rate = 0.0;
    job.finish_at = kInf;
    for (curve::ProfilingAdvisor& advisor : advisors_)
      advisor.Forget(specs_[static_cast<std::size_t>(j)].name);
  }
  if (any_finished) {
    last_finish_s_ = t;
    idle_at_last_finish_ = idle_node_s_;
    used_at_last_finish_ = used_node_s_;
    active_.erase(
        std::remove_if(
            active_.begin(), active_.end(),
            [&](int j) { return jobs_[static_cast<std::size_t>(j)].phase == JobState::Phase::kFinished; }),
        active_.end());
  }
}

namespace {

// What a learned replay asks the advisor for: the speedup when the workload's objective is the
// job's throughput over its own one-node rate (relative 1e-6 at every breakpoint), else the
// throughput. The workload's curves are the oracle's knowledge: only the objective's definition
// carries over, and its unit (X(1)) is learned like the rest of the curve. A job with
// configurations is valued in throughput (their objectives have no common unit to learn).
curve::Objective LearnedObjective(const JobSpec& spec) {
  const double one = spec.throughput.Evaluate(1);
  if (!spec.configurations.empty() || !(one > 0.0)) return curve::Objective::kThroughput;
  for (const int n : spec.objective.nodes()) {
    if (n < 1) continue;
    const double rate = spec.throughput.Evaluate(n);
    if (std::abs(spec.objective.Evaluate(n) * one - rate) > 1e-6 * rate) return curve::Objective::kThroughput;
  }
  return curve::Objective::kSpeedup;
}

}  // namespace

// Learned mode: the job as the advisors see it. Each configuration's curves come from its own
// advisor (curves only as far as the replay has nodes: the allocator never evaluates beyond the
// pool); the rescale costs are the measured means of the configuration it runs now, once measured,
// the last ones given (at first the spec's) until then. Efficiencies are the workload's.
// kLearnedCurves keeps the spec's costs, kLearnedCosts the spec's curves (the oracle's job).
alloc::Job Engine::LearnedJob(int j) {
  const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
  JobState& state = jobs_[static_cast<std::size_t>(j)];
  const int top = std::max(1, std::min(spec.max_nodes, subset_size_));
  const curve::ProfilingAdvisor& current = advisors_[static_cast<std::size_t>(state.configuration)];
  if (opt_.curves != CurveMode::kLearnedCurves && current.HasJob(spec.name)) {
    curve::MeasuredRescaleCosts(current.Profile(spec.name), &state.allocator_scale_up_s,
                                &state.allocator_scale_down_s);
  }
  if (opt_.curves == CurveMode::kLearnedCosts) {
    alloc::Job job = oracle_jobs_[static_cast<std::size_t>(j)];
    job.scale_up_s = state.allocator_scale_up_s;
    job.scale_down_s = state.allocator_scale_down_s;
    return job;
  }
  curve::AdvisorCurves curves = advisors_[0].Curves(spec.name, top, LearnedObjective(spec));
  alloc::Job job = ToAllocJob(spec, std::move(curves.objective), std::move(curves.throughput),
                              state.allocator_scale_up_s, state.allocator_scale_down_s);
  if (opt_.configurations == ConfigurationMode::kFullOnly) job.configurations.clear();
  for (std::size_t k = 0; k < job.configurations.size(); ++k) {
    curve::AdvisorCurves learned = advisors_[k + 1].Curves(spec.name, top);
    job.configurations[k].objective = std::move(learned.objective);
    job.configurations[k].throughput = std::move(learned.throughput);
  }
  return job;
}

// Learned modes: the advisor's estimate of the job's current rate (JobProgress::estimate).
double Engine::LearnedRate(int j) const {
  const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
  const JobState& job = jobs_[static_cast<std::size_t>(j)];
  const int n = static_cast<int>(job.nodes.size());
  if (advisors_.empty() || n < spec.min_nodes || n == 0) return 0.0;
  const int top = std::max(1, std::min(spec.max_nodes, subset_size_));
  return Efficiency(spec, job.configuration) * advisors_[static_cast<std::size_t>(job.configuration)]
                                                   .ThroughputEstimate(spec.name, top)
                                                   .Evaluate(n);
}

// Learned mode: credits the job's new progress (its counter since the last credit) to the
// configuration it ran in, in raw samples (a sample counts efficiency of one in `done`).
void Engine::CreditCounter(JobState& job, const JobSpec& spec) {
  job.counter = std::max(job.counter, job.done);
  const double progress = job.counter - job.credited_counter;
  if (progress > 0.0) {
    job.configuration_samples[static_cast<std::size_t>(job.configuration)] +=
        progress / Efficiency(spec, job.configuration);
    job.credited_counter = job.counter;
  }
}

// Learned mode: tells a configuration's advisor that from t on the job runs there on `nodes` nodes.
void Engine::ReportConfiguration(int j, double t, int configuration, int nodes) {
  const JobState& job = jobs_[static_cast<std::size_t>(j)];
  advisors_[static_cast<std::size_t>(configuration)].Report(
      specs_[static_cast<std::size_t>(j)].name, t, nodes,
      job.configuration_samples[static_cast<std::size_t>(configuration)]);
}

// Calls the allocator and applies its allocation; returns the wall time of the call.
double Engine::Allocate(double t, int* rescales) {
  problem_.jobs.clear();
  problem_.current.clear();
  for (const int j : active_) {
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    problem_.jobs.push_back(advisors_.empty() ? oracle_jobs_[static_cast<std::size_t>(j)] : LearnedJob(j));
    const JobState& state = jobs_[static_cast<std::size_t>(j)];
    problem_.jobs.back().configuration = state.configuration;
    if (policy_.Needs(alloc::PolicyInput::kRemainingSamples))
      problem_.jobs.back().remaining_samples = std::max(0.0, spec.work - state.done + state.debt);
    for (const NodeId node : state.nodes) problem_.current.push_back({node, spec.name});
  }
  problem_.pool = pool_;
  problem_.expected_idle_s.clear();
  if (lifetime_) {
    for (const NodeId node : pool_) {
      problem_.expected_idle_s.push_back(
          lifetime_->ExpectedRemaining(t - idle_since_[static_cast<std::size_t>(node)]));
    }
  }
  problem_.tfwd_s = opt_.tfwd_s;

  const auto t0 = std::chrono::steady_clock::now();
  const alloc::Allocation allocation = alloc::Solve(problem_, solve_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (allocation.termination == milp::Termination::kInterrupted) {
    throw Interrupted("replay interrupted at t = " + std::to_string(now_) + " s (" + allocation.message +
                      ")");
  }
  if (allocation.status == alloc::AllocationStatus::kTimeLimit ||
      (allocation.status == alloc::AllocationStatus::kFailed &&
       allocation.termination == milp::Termination::kTimeLimit)) {
    ++allocator_time_limits_;
  } else if (allocation.status == alloc::AllocationStatus::kFailed) {
    ++allocator_failures_;
  }
  allocator_times_.push_back(seconds);

  if (allocation.jobs.size() != active_.size()) throw Error("allocator returned a different number of jobs");
  // Releases first: a node one job releases may go to another job in the same allocation.
  for (std::size_t k = 0; k < active_.size(); ++k) {
    const int j = active_[k];
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    const JobState& job = jobs_[static_cast<std::size_t>(j)];
    const alloc::JobAllocation& ja = allocation.jobs[k];
    const int c = static_cast<int>(job.nodes.size());
    if (ja.id != spec.name || ja.nodes_before != c ||
        ja.kept.size() + ja.released.size() != static_cast<std::size_t>(c) ||
        ja.nodes_after != static_cast<int>(ja.kept.size() + ja.added.size())) {
      throw Error("allocator returned an inconsistent allocation for job \"" + spec.name + "\"");
    }
    for (const NodeId node : ja.released) {
      if (node < 0 || node >= static_cast<NodeId>(owner_.size()) ||
          owner_[static_cast<std::size_t>(node)] != j) {
        throw Error("allocator released node " + std::to_string(node) + " that job \"" + spec.name +
                    "\" does not hold");
      }
      owner_[static_cast<std::size_t>(node)] = -1;
      if (opt_.record_assignments) result_.assignments.push_back({t, node, -1});
    }
  }
  for (std::size_t k = 0; k < active_.size(); ++k) {
    const int j = active_[k];
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    const alloc::JobAllocation& ja = allocation.jobs[k];
    for (const NodeId node : ja.added) {
      if (node < 0 || node >= static_cast<NodeId>(owner_.size()) || !idle_[static_cast<std::size_t>(node)] ||
          owner_[static_cast<std::size_t>(node)] != -1) {
        throw Error("allocator gave job \"" + spec.name + "\" node " + std::to_string(node) +
                    " that is not free");
      }
      owner_[static_cast<std::size_t>(node)] = j;
      if (opt_.record_assignments) result_.assignments.push_back({t, node, j});
    }
    const int c = static_cast<int>(job.nodes.size());
    const int n = ja.nodes_after;
    if (!ja.released.empty() || !ja.added.empty()) {
      job.nodes.clear();
      std::merge(ja.kept.begin(), ja.kept.end(), ja.added.begin(), ja.added.end(),
                 std::back_inserter(job.nodes));
    }
    used_ += n - c;
    // Only a running job (at least min_nodes) is rescaled; a job below its minimum that the
    // allocator releases to 0 or restarts is not (its rate and the allocator's penalty are 0).
    // A change of configuration restarts a running job: at the same count it is charged like a
    // growth, otherwise the rescale's charge covers it (as the allocator's penalty says). A job
    // stopped (0 nodes) also owes its cold start (restart_s), charged when it runs again, at the
    // rate it runs at then (the allocator's penalty charges it at the stop: a decision's estimate).
    const int before = job.configuration;
    const int after = n > 0 ? ja.configuration : before;
    const bool running = c >= spec.min_nodes;
    if (running && (n != c || after != before)) {
      accounting_->Charge(job, (n < c ? spec.scale_down_s : spec.scale_up_s) * RateAt(spec, before, c));
      if (n == 0) job.restart_owed = true;
      if (n != c) {
        ++job.rescales;
        ++*rescales;
      }
    } else if (!running && n >= spec.min_nodes && job.restart_owed) {
      accounting_->Charge(job, spec.restart_s * RateAt(spec, after, n));
      job.restart_owed = false;
    }
    if (after != before) {
      if (running && n > 0) ++job.configuration_switches;
      job.configuration = after;
      if (!advisors_.empty()) {
        ReportConfiguration(j, t, before, 0);
        ReportConfiguration(j, t, after, n);
      }
    }
  }
  return seconds;
}

void Engine::ReportToAdvisor(double t) {
  for (const int j : active_) {
    const JobState& job = jobs_[static_cast<std::size_t>(j)];
    ReportConfiguration(j, t, job.configuration, static_cast<int>(job.nodes.size()));
  }
}

void Engine::RecordStep(double t, int transitions, int rescales, int preemptions, double allocator_s) {
  Step s;
  s.time_s = t;
  s.transitions = transitions;
  s.idle_nodes = static_cast<int>(pool_.size());
  s.used_nodes = used_;
  s.active_jobs = static_cast<int>(active_.size());
  // Jobs submitted by t and not yet admitted: queue_ is sorted by submit time, so a binary search
  // (the work of a step must not grow with jobs that have not arrived).
  const auto submitted_end = std::upper_bound(
      queue_.begin() + static_cast<std::ptrdiff_t>(next_queued_), queue_.end(), t, [&](double time, int j) {
        return time < std::max(specs_[static_cast<std::size_t>(j)].submit_s, start_);
      });
  s.queued_jobs =
      static_cast<int>(submitted_end - (queue_.begin() + static_cast<std::ptrdiff_t>(next_queued_)));
  s.finished_jobs = finished_;
  s.rescales = rescales;
  s.preemptions = preemptions;
  s.allocator_s = allocator_s;
  double done = retired_done_;
  for (const int j : active_) done += jobs_[static_cast<std::size_t>(j)].done;
  s.samples_done = done;
  for (const int j : active_) {
    const JobState& job = jobs_[static_cast<std::size_t>(j)];
    s.rate += job.rate;
    if (!job.nodes.empty()) ++s.running_jobs;
  }
  result_.steps.push_back(s);
}

// The window and the state at its start: continuous, [start_s or 0, end_s or the last transition]
// with the transitions before the start applied; reference, from start_s or the
// kReferenceStartEvent-th distinct time of the whole trace, with the transitions up to and
// including it applied, to end_s or the last transition.
void Engine::SetupWindow() {
  const std::vector<Transition>& tr = trace_.transitions;
  const double last = static_cast<double>(std::max<std::int64_t>(trace_.last_time_s(), 0));
  start_ = accounting_->WindowStart(trace_, opt_);
  end_ = opt_.end_s.value_or(last);
  if (end_ < start_) {
    throw InvalidArgument("end_s (" + std::to_string(end_) + ") is before start_s (" +
                          std::to_string(start_) + ")");
  }
  for (; next_transition_ < tr.size(); ++next_transition_) {
    const Transition& x = tr[next_transition_];
    const double time = static_cast<double>(x.time_s);
    if (!accounting_->AppliedBeforeStart(time, start_)) break;
    if (!in_subset_[static_cast<std::size_t>(x.node)]) continue;
    ObserveLifetime(x);
    if (x.state == NodeState::kIdle) {
      AddIdle(x.node);
    } else {
      RemoveIdle(x.node);
    }
  }
  now_ = start_;
}

// Applies the trace's transitions at times <= t within the node subset: `idle` adds a node to the
// pool; `busy` removes it, and a job running on it loses it (a preemption, charged once per job:
// scale_down_s times its rate before the event).
void Engine::ApplyTransitions(double t, int* transitions, int* preemptions) {
  for (const int j : active_) {
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    job.reclaimed_now = false;
    job.rate_before_event = job.rate;
    if (!advisors_.empty()) CreditCounter(job, specs_[static_cast<std::size_t>(j)]);
  }
  const std::vector<Transition>& tr = trace_.transitions;
  for (; next_transition_ < tr.size() && static_cast<double>(tr[next_transition_].time_s) <= t;
       ++next_transition_) {
    const Transition& x = tr[next_transition_];
    const auto i = static_cast<std::size_t>(x.node);
    if (!in_subset_[i]) continue;
    ++*transitions;
    ObserveLifetime(x);
    if (x.state == NodeState::kIdle) {
      AddIdle(x.node);
      continue;
    }
    RemoveIdle(x.node);
    const int j = owner_[i];
    if (j < 0) continue;
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    owner_[i] = -1;
    --used_;
    if (opt_.record_assignments) result_.assignments.push_back({t, x.node, -1});
    job.nodes.erase(std::lower_bound(job.nodes.begin(), job.nodes.end(), x.node));
    if (!job.reclaimed_now) {
      job.reclaimed_now = true;
      ++job.preemptions;
      ++*preemptions;
    }
  }
  for (const int j : active_) {
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    if (!job.reclaimed_now) continue;
    // A reclaim that leaves a running job below its minimum stops it: it owes its cold start too.
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    if (job.rate_before_event > 0.0 && static_cast<int>(job.nodes.size()) < spec.min_nodes)
      job.restart_owed = true;
    accounting_->Charge(job, spec.scale_down_s * job.rate_before_event);
    if (!advisors_.empty()) ReportConfiguration(j, t, job.configuration, static_cast<int>(job.nodes.size()));
  }
}

// Arrivals up to t, then first come first served admission up to max_jobs. Returns true if a job
// was admitted; *arrived says whether a job arrived.
bool Engine::Admit(double t, bool* arrived) {
  *arrived = false;
  for (; next_arrival_ < queue_.size() &&
         std::max(specs_[static_cast<std::size_t>(queue_[next_arrival_])].submit_s, start_) <= t;
       ++next_arrival_) {
    *arrived = true;
  }
  bool admitted = false;
  while (next_queued_ < queue_.size() && static_cast<int>(active_.size()) < opt_.max_jobs) {
    const int j = queue_[next_queued_];
    if (std::max(specs_[static_cast<std::size_t>(j)].submit_s, start_) > t) break;
    ++next_queued_;
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    job.phase = JobState::Phase::kActive;
    job.admit_s = t;
    ++admitted_;
    active_.push_back(j);
    admitted = true;
    if (first_admit_s_ < 0) {
      first_admit_s_ = t;
      idle_at_first_admit_ = idle_node_s_;
      used_at_first_admit_ = used_node_s_;
    }
    if (!advisors_.empty()) {
      job.configuration_samples.assign(advisors_.size(), 0.0);
      if (!opt_.models.empty() && !opt_.models[static_cast<std::size_t>(j)].empty()) {
        for (curve::ProfilingAdvisor& advisor : advisors_)
          advisor.SetModel(specs_[static_cast<std::size_t>(j)].name,
                           opt_.models[static_cast<std::size_t>(j)]);
      }
      ReportConfiguration(j, t, 0, 0);
    }
  }
  return admitted;
}

// Calls the allocator if asked (and there are both idle nodes and admitted jobs: with no idle node
// every job is at 0 nodes), sets the jobs' new rates and records the event's step row.
void Engine::Decide(double t, int transitions, int preemptions, bool allocate) {
  int rescales = 0;
  double allocator_s = 0.0;
  if (allocate && !active_.empty() && !pool_.empty()) allocator_s = Allocate(t, &rescales);
  for (const int j : active_) {
    JobState& job = jobs_[static_cast<std::size_t>(j)];
    const JobSpec& spec = specs_[static_cast<std::size_t>(j)];
    job.rate = RateAt(spec, job.configuration, static_cast<int>(job.nodes.size()));
    job.finish_at = job.rate > 0.0 ? t + (spec.work - job.done + job.debt) / job.rate : kInf;
  }
  if (!advisors_.empty()) ReportToAdvisor(t);
  total_rescales_ += rescales;
  total_preemptions_ += preemptions;
  RecordStep(t, transitions, rescales, preemptions, allocator_s);
  if (opt_.record_job_progress) {
    for (const int j : active_) {
      const JobState& job = jobs_[static_cast<std::size_t>(j)];
      result_.progress.push_back(
          {t, j, job.done, static_cast<int>(job.nodes.size()), job.rate, LearnedRate(j)});
    }
  }
  const double span = end_ - start_;
  if (opt_.on_progress && span > 0 && (t - start_) / span >= next_progress_) {
    opt_.on_progress((t - start_) / span);
    next_progress_ = (t - start_) / span + 0.005;
  }
}

// solve.milp.interrupt, polled between events too: true stops the replay.
void Engine::CheckInterrupt() const {
  if (opt_.solve.milp.interrupt && opt_.solve.milp.interrupt()) {
    throw Interrupted("replay interrupted at t = " + std::to_string(now_) + " s");
  }
}

// Continuous accounting: events at trace transitions, arrivals and finishes, in [start, end).
void Engine::RunContinuous() {
  const std::vector<Transition>& tr = trace_.transitions;
  const double span = end_ - start_;
  bool first = true;
  while (true) {
    const double t_trace =
        next_transition_ < tr.size() ? static_cast<double>(tr[next_transition_].time_s) : kInf;
    const double t_submit =
        next_arrival_ < queue_.size()
            ? std::max(specs_[static_cast<std::size_t>(queue_[next_arrival_])].submit_s, start_)
            : kInf;
    const double t_finish = NextFinish();
    CheckInterrupt();
    const double t = first ? start_ : std::max(now_, std::min({t_trace, t_submit, t_finish}));
    if (t >= end_ && !(first && t == end_ && span == 0.0)) break;
    first = false;
    const int finished_before = finished_;
    Advance(t);
    RetireFinished(t);
    int transitions = 0;
    int preemptions = 0;
    ApplyTransitions(t, &transitions, &preemptions);
    bool arrived = false;
    const bool admitted = Admit(t, &arrived);
    const bool changed = finished_ != finished_before || transitions > 0 || admitted;
    if (!changed && !arrived) continue;  // e.g. transitions outside the node subset only
    Decide(t, transitions, preemptions, changed);
  }
  if (now_ < end_) {
    Advance(end_);
    RetireFinished(end_);
    RecordStep(end_, 0, 0, 0, 0.0);
    for (const int j : active_) {
      const JobState& job = jobs_[static_cast<std::size_t>(j)];
      if (opt_.record_job_progress)
        result_.progress.push_back(
            {end_, j, job.done, static_cast<int>(job.nodes.size()), job.rate, LearnedRate(j)});
    }
  }
}

// Reference accounting: one event at the window's start, then one at each later time at which a
// node of the subset changes state, up to end_s; stops early once every job has finished.
void Engine::RunReference() {
  const std::vector<Transition>& tr = trace_.transitions;
  double t = start_;
  bool first = true;
  while (true) {
    if (!first) {
      while (next_transition_ < tr.size() &&
             !in_subset_[static_cast<std::size_t>(tr[next_transition_].node)]) {
        ++next_transition_;
      }
      if (next_transition_ >= tr.size() || static_cast<double>(tr[next_transition_].time_s) > end_) break;
      t = static_cast<double>(tr[next_transition_].time_s);
    }
    first = false;
    CheckInterrupt();
    Advance(t);
    int transitions = 0;
    int preemptions = 0;
    ApplyTransitions(t, &transitions, &preemptions);
    RetireFinished(t);
    if (finished_ == static_cast<int>(queue_.size())) {  // nothing queued, running or still to come
      // The last job may have been preempted at the event it finishes at.
      total_preemptions_ += preemptions;
      RecordStep(t, transitions, 0, preemptions, 0.0);
      break;
    }
    bool arrived = false;
    Admit(t, &arrived);
    Decide(t, transitions, preemptions, true);
  }
  end_ = now_;
}

ReplayResult Engine::Run() {
  const auto wall0 = std::chrono::steady_clock::now();
  std::string error;
  if (!opt_.IsValid(&error)) throw InvalidArgument(error);
  policy_ = alloc::FindPolicy(solve_.solver);
  if (!trace_.IsValid(&error)) throw InvalidArgument("trace: " + error);
  {
    std::unordered_set<std::string> names;
    for (const JobSpec& spec : specs_) {
      if (!spec.IsValid(&error)) throw InvalidArgument(error);
      if (!names.insert(spec.name).second)
        throw InvalidArgument("job \"" + spec.name + "\": duplicate job name");
    }
  }
  if (!opt_.models.empty() && opt_.models.size() != specs_.size()) {
    throw InvalidArgument("models: " + std::to_string(opt_.models.size()) + " given for " +
                          std::to_string(specs_.size()) + " jobs (one per job, or none)");
  }
  SetupNodes();
  if (policy_.Needs(alloc::PolicyInput::kExpectedIdleS)) {
    lifetime_ = std::make_unique<IdleLifetimePredictor>();
    idle_since_.assign(trace_.node_names.size(), -1.0);
  }
  SetupWindow();
  accounting_->Adjust(&solve_);
  for (std::size_t j = 0; j < specs_.size(); ++j) {
    jobs_[j].allocator_scale_up_s = specs_[j].scale_up_s;
    jobs_[j].allocator_scale_down_s = specs_[j].scale_down_s;
  }
  const bool choose = opt_.configurations == ConfigurationMode::kChoose;
  if (opt_.curves != CurveMode::kOracle) {
    std::size_t configurations = 0;
    for (const JobSpec& spec : specs_) configurations = std::max(configurations, spec.configurations.size());
    advisors_.assign(1 + (choose ? configurations : 0), curve::ProfilingAdvisor(opt_.advisor));
  }
  if (opt_.curves == CurveMode::kOracle || opt_.curves == CurveMode::kLearnedCosts) {
    oracle_jobs_.reserve(specs_.size());
    for (const JobSpec& spec : specs_) {
      oracle_jobs_.push_back(alloc::FromJobSpec(spec));
      if (!choose) oracle_jobs_.back().configurations.clear();
    }
  }
  for (std::size_t j = 0; j < specs_.size(); ++j) {
    if (specs_[j].submit_s <= end_) queue_.push_back(static_cast<int>(j));
  }
  std::stable_sort(queue_.begin(), queue_.end(), [&](int a, int b) {
    return specs_[static_cast<std::size_t>(a)].submit_s < specs_[static_cast<std::size_t>(b)].submit_s;
  });
  result_.steps.reserve(
      std::min<std::size_t>(trace_.transitions.size() - next_transition_ + 2 * specs_.size() + 2, 1u << 22));
  accounting_->RunEvents(*this);
  if (opt_.on_progress) opt_.on_progress(1.0);
  Summarize();
  result_.summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(result_);
}

}  // namespace bft::sim::engine

namespace bft::sim {

ReplayResult Replay(const Trace& trace, const std::vector<JobSpec>& jobs, const ReplayOptions& options) {
  return engine::Engine(trace, jobs, options).Run();
}

}  // namespace bft::sim
