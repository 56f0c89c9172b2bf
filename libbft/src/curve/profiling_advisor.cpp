// The job profiling advisor: see bft/profiling.h for the protocol and docs/curve.md for the rules.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "bft/profiling.h"
#include "grid.h"
#include "num.h"
#include "profiling_state.h"

namespace bft::curve {
namespace {

using internal::Interval;
using internal::JobState;
using internal::ModelState;
using internal::SizeData;

constexpr int kMaxRescalesKept = 64;

using internal::Num;

}  // namespace

const char* ToString(RescaleMethod method) {
  switch (method) {
    case RescaleMethod::kRelaunch:
      return "relaunch";
    case RescaleMethod::kInPlace:
      return "inplace";
  }
  return "?";
}

RescaleMethod RescaleMethodFromString(const std::string& label) {
  for (RescaleMethod m : kRescaleMethods)
    if (label == ToString(m)) return m;
  throw InvalidArgument("unknown rescale method '" + label + "' (expected 'relaunch' or 'inplace')");
}

const char* ToString(Objective objective) {
  switch (objective) {
    case Objective::kThroughput:
      return "throughput";
    case Objective::kSpeedup:
      return "speedup";
  }
  return "?";
}

Objective ObjectiveFromString(const std::string& label) {
  for (const Objective o : {Objective::kThroughput, Objective::kSpeedup})
    if (label == ToString(o)) return o;
  throw InvalidArgument("objective '" + label + "': expected throughput or speedup");
}

const RescaleCosts& JobProfile::MethodCosts(RescaleMethod method) const {
  for (const RescaleCosts& c : costs)
    if (c.method == method) return c;
  throw InvalidArgument(std::string("job profile of '") + job_id + "' has no costs of rescale method '" +
                        ToString(method) + "'");
}

bool AdvisorOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& why) {
    if (error != nullptr) *error = "advisor options: " + why;
    return false;
  };
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0.0; };
  if (!finite_nonneg(warmup_s)) return fail("warmup_s " + Num(warmup_s) + " must be finite and >= 0");
  if (warmup_intervals < 0) return fail("warmup_intervals must be >= 0");
  if (std::isnan(half_life_s)) return fail("half_life_s is NaN");
  if (!(drift_threshold > 0.0) || !std::isfinite(drift_threshold)) return fail("drift_threshold must be > 0");
  if (drift_intervals < 1) return fail("drift_intervals must be >= 1");
  if (!(drift_discount >= 0.0 && drift_discount <= 1.0)) return fail("drift_discount must be in [0, 1]");
  if (max_intervals_per_size < 2) return fail("max_intervals_per_size must be >= 2");
  if (!(prior_samples_per_node_s > 0.0) || !std::isfinite(prior_samples_per_node_s))
    return fail("prior_samples_per_node_s must be finite and > 0");
  if (!(single_interval_rel_sd > 0.0) || !std::isfinite(single_interval_rel_sd))
    return fail("single_interval_rel_sd must be finite and > 0");
  if (!finite_nonneg(rel_sd_per_doubling)) return fail("rel_sd_per_doubling must be finite and >= 0");
  if (!finite_nonneg(exploration_bonus)) return fail("exploration_bonus must be finite and >= 0");
  std::string fit_error;
  if (!fit.IsValid(&fit_error)) return fail(fit_error);
  return true;
}

// The state (internal::AdvisorState: what Save writes) and the rules that derive estimates from it.
struct ProfilingAdvisor::Impl : internal::AdvisorState {
  void RefitModel(ModelState* model) const {
    model->fit_ok = false;
    model->fit = FitResult();
    if (model->rates.size() < 2) return;
    std::vector<Sample> samples;
    for (const auto& [n, rate] : model->rates) samples.push_back({static_cast<double>(n), rate, 1.0});
    model->fit = Fit(samples, options.fit);
    model->fit_ok = model->fit.ok();
  }

  // A job's estimates at the given sizes (all if `only` is 0) become its model's latest, in the
  // model's scale (divided by the job's scale against the model), so that a job faster than its
  // siblings does not bend the shared curve; a job whose shape disagrees shares nothing.
  void ShareWithModel(const JobState& job, int only) {
    if (job.model.empty()) return;
    ModelState& model = models[job.model];
    double scale = 1.0;
    if (!model.rates.empty() && !ModelScale(job, model, &scale)) return;
    bool changed = false;
    for (const SizeEstimate& e : job.estimates) {
      if (only != 0 && e.nodes != only) continue;
      double& rate = model.rates[e.nodes];
      changed = changed || rate != e.samples_per_s / scale;
      rate = e.samples_per_s / scale;
    }
    if (changed) RefitModel(&model);
  }

  // The job's scale against its model's curve: the geometric mean of own rate / model curve over
  // its measured sizes within the model's measured range (where the curve is measured, not
  // extrapolated), or over all of them if none is; 1 without any. False if the ratios within the
  // range spread by more than fit.duplicate_tolerance (the job scales differently).
  bool ModelScale(const JobState& job, const ModelState& model, double* scale) const {
    *scale = 1.0;
    const int first = model.rates.begin()->first;
    const int last = model.rates.rbegin()->first;
    double log_in = 0.0, log_all = 0.0, lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    int in_range = 0;
    for (const SizeEstimate& e : job.estimates) {
      const double r = e.samples_per_s / ModelCurve(model, e.nodes);
      if (!(r > 0.0) || !std::isfinite(r)) return false;
      log_all += std::log(r);
      if (e.nodes < first || e.nodes > last) continue;
      ++in_range;
      log_in += std::log(r);
      lo = std::min(lo, r);
      hi = std::max(hi, r);
    }
    if (job.estimates.empty()) return true;
    *scale = in_range > 0 ? std::exp(log_in / in_range)
                          : std::exp(log_all / static_cast<double>(job.estimates.size()));
    return in_range == 0 || (hi - lo) / *scale <= options.fit.duplicate_tolerance;
  }

  // The model's curve at n: the fit (extrapolated by options.fit) anchored to the measurements,
  // linear through a single size, or piecewise-linear through the sizes if the fit failed.
  static double ModelCurve(const ModelState& model, int n) {
    if (model.fit_ok) return model.fit.Evaluate(n) * FitResidual(model, n);
    if (model.rates.size() == 1) return model.rates.begin()->second * n / model.rates.begin()->first;
    std::vector<int> nodes;
    std::vector<double> values;
    for (const auto& [m, rate] : model.rates) {
      nodes.push_back(m);
      values.push_back(rate);
    }
    return ThroughputCurve(nodes, values).Evaluate(n);
  }

  // The fit's residual at n, measured rate / fit: exact at the model's measured sizes, linear in
  // log2 n between them, held at the end values beyond. Multiplying the fit by it makes the model's
  // curve pass through what siblings measured, so that its marginal gains next to a measured size
  // are not the fit's error there (a fit off by 8 % at one size would show as a jump); the fit
  // supplies only the shape between and beyond the measurements.
  static double FitResidual(const ModelState& model, int n) {
    const auto ratio = [&model](const std::pair<const int, double>& size) {
      const double r = size.second / model.fit.Evaluate(size.first);
      return r > 0.0 && std::isfinite(r) ? r : 1.0;
    };
    if (model.rates.empty()) return 1.0;
    const auto hi = model.rates.lower_bound(n);
    if (hi == model.rates.begin()) return ratio(*hi);
    if (hi == model.rates.end()) return ratio(*model.rates.rbegin());
    if (hi->first == n) return ratio(*hi);
    const auto lo = std::prev(hi);
    const double w =
        std::log2(static_cast<double>(n) / lo->first) / std::log2(static_cast<double>(hi->first) / lo->first);
    return ratio(*lo) + w * (ratio(*hi) - ratio(*lo));
  }

  // The model prior for a job with fewer than three measured sizes of its own (with three its own
  // fit can tell the shape): its model's curve, scaled by the job's own measurements (the
  // geometric mean of own rate / model curve), if they agree with the model's shape within
  // fit.duplicate_tolerance. Null if there is none.
  const ModelState* ModelPrior(const JobState* job, double* scale) const {
    *scale = 1.0;
    if (job == nullptr || job->model.empty() || job->estimates.size() >= 3) return nullptr;
    const auto it = models.find(job->model);
    if (it == models.end() || it->second.rates.empty()) return nullptr;
    return ModelScale(*job, it->second, scale) ? &it->second : nullptr;
  }

  double Age(const JobState& job, const Interval& iv) const {
    if (!(options.half_life_s > 0.0) || !std::isfinite(options.half_life_s)) return iv.mult;
    return iv.mult * std::exp2(-(job.last_t - iv.t_end) / options.half_life_s);
  }

  // Estimate at one size from intervals [0, end).
  SizeEstimate EstimateOf(const JobState& job, int n, const SizeData& sd, std::size_t end) const {
    SizeEstimate e;
    e.nodes = n;
    double sw = 0.0, sw2 = 0.0, swd = 0.0, sws = 0.0;
    for (std::size_t i = 0; i < end; ++i) {
      const Interval& iv = sd.intervals[i];
      const double w = Age(job, iv);
      sw += w;
      sw2 += w * w;
      swd += w * iv.duration_s;
      sws += w * iv.samples;
      e.steady_s += iv.duration_s;
    }
    e.intervals = static_cast<int>(end);
    if (end == 0 || !(swd > 0.0)) return e;
    e.samples_per_s = sws / swd;
    e.weight = sw2 > 0.0 ? sw * sw / sw2 : 0.0;
    if (end >= 3 && e.samples_per_s > 0.0) {
      // Spread of the interval rates, weighted by aged duration.
      double var = 0.0;
      for (std::size_t i = 0; i < end; ++i) {
        const Interval& iv = sd.intervals[i];
        const double r = iv.samples / iv.duration_s - e.samples_per_s;
        var += Age(job, iv) * iv.duration_s * r * r;
      }
      var /= swd;
      const double n_eff = std::max(e.weight, 1.0);
      e.rel_sd = std::max(std::sqrt(var / std::max(n_eff - 1.0, 1.0)) / e.samples_per_s, 1e-3);
    } else {
      e.rel_sd =
          options.single_interval_rel_sd / std::sqrt(static_cast<double>(std::max<std::size_t>(end, 1)));
    }
    return e;
  }

  void Refresh(JobState* job) const {
    job->estimates.clear();
    for (const auto& [n, sd] : job->sizes) {
      if (sd.intervals.empty()) continue;
      const SizeEstimate e = EstimateOf(*job, n, sd, sd.intervals.size());
      if (e.samples_per_s > 0.0) job->estimates.push_back(e);
    }
    job->fit_ok = false;
    job->fit = FitResult();
    if (job->estimates.size() < 2) return;
    std::vector<Sample> samples;
    samples.reserve(job->estimates.size());
    for (const SizeEstimate& e : job->estimates)
      samples.push_back({static_cast<double>(e.nodes), e.samples_per_s, 1.0 / (e.rel_sd * e.rel_sd)});
    // Normalise the weights to mean 1 (only their ratios matter).
    double mean = 0.0;
    for (const Sample& s : samples) mean += s.weight / samples.size();
    for (Sample& s : samples) s.weight /= mean;
    job->fit = Fit(samples, options.fit);
    job->fit_ok = job->fit.ok();
  }

  const SizeEstimate* Measured(const JobState& job, int n) const {
    for (const SizeEstimate& e : job.estimates)
      if (e.nodes == n) return &e;
    return nullptr;
  }

  double PriorRate(const JobState* job) const {
    return job != nullptr && job->has_prior ? job->prior : options.prior_samples_per_node_s;
  }

  // Relative standard deviation of the fit's prediction (the model error) where nothing was measured.
  double FitRelSd(const JobState& job) const {
    double base = job.fit.best.rms_rel_error;
    if (job.fit.best.loo_rel_error >= 0.0 && std::isfinite(job.fit.best.loo_rel_error))
      base = std::max(base, job.fit.best.loo_rel_error);
    return std::max(base, 0.005);
  }

  double Estimate(const JobState* job, int n) const {
    if (n <= 0) return 0.0;
    double scale = 1.0;
    if (const ModelState* prior = ModelPrior(job, &scale)) {
      const SizeEstimate* m = Measured(*job, n);
      return m != nullptr ? m->samples_per_s : scale * ModelCurve(*prior, n);
    }
    if (job == nullptr || job->estimates.empty()) return PriorRate(job) * n;
    if (job->estimates.size() == 1) {  // optimistic: linear scaling through the one measured size
      const SizeEstimate& e = job->estimates.front();
      return e.samples_per_s * n / e.nodes;
    }
    if (!job->fit_ok) {  // piecewise-linear through the measurements, flat beyond the largest
      std::vector<int> nodes;
      std::vector<double> values;
      for (const SizeEstimate& e : job->estimates) {
        nodes.push_back(e.nodes);
        values.push_back(e.samples_per_s);
      }
      return ThroughputCurve(nodes, values).Evaluate(n);
    }
    const double model = job->fit.Evaluate(n);
    const SizeEstimate* m = Measured(*job, n);
    if (m == nullptr) return model;
    // Inverse-variance blend of the measurement and the model at a measured size.
    const double wm = 1.0 / (m->rel_sd * m->rel_sd);
    const double f = FitRelSd(*job);
    const double wf = 1.0 / (f * f);
    return (wm * m->samples_per_s + wf * model) / (wm + wf);
  }

  double RelSd(const JobState* job, int n) const {
    double scale = 1.0;
    if (const ModelState* prior = ModelPrior(job, &scale)) {
      // As for a job measured by one interval at each of the model's sizes (and its own).
      const SizeEstimate* m = Measured(*job, n);
      if (m != nullptr) return m->rel_sd;
      double nearest = std::numeric_limits<double>::infinity();
      for (const auto& [size, rate] : prior->rates)
        nearest = std::min(nearest, std::abs(std::log2(static_cast<double>(n) / size)));
      for (const SizeEstimate& e : job->estimates)
        nearest = std::min(nearest, std::abs(std::log2(static_cast<double>(n) / e.nodes)));
      return std::min(1.0, options.single_interval_rel_sd + options.rel_sd_per_doubling * nearest);
    }
    if (job == nullptr || job->estimates.empty()) return 1.0;
    const SizeEstimate* m = Measured(*job, n);
    double base;
    if (job->estimates.size() >= 2 && job->fit_ok) {
      base = FitRelSd(*job);
      if (m != nullptr) return 1.0 / std::sqrt(1.0 / (m->rel_sd * m->rel_sd) + 1.0 / (base * base));
    } else {
      if (m != nullptr) return m->rel_sd;
      base = options.single_interval_rel_sd;
    }
    double nearest = std::numeric_limits<double>::infinity();
    for (const SizeEstimate& e : job->estimates)
      nearest = std::min(nearest, std::abs(std::log2(static_cast<double>(n) / e.nodes)));
    return std::min(1.0, base + options.rel_sd_per_doubling * nearest);
  }

  const JobState* Find(const std::string& id) const {
    const auto it = jobs.find(id);
    return it == jobs.end() ? nullptr : &it->second;
  }

  void AddSteady(JobState* job, int n, const Interval& iv) {
    SizeData& sd = job->sizes[n];
    const double rate = iv.samples / iv.duration_s;
    // Drift: compare with the estimate from the intervals before the current run of deviations.
    const std::size_t base_end = sd.intervals.size() - static_cast<std::size_t>(sd.drift_count);
    if (base_end > 0) {
      const SizeEstimate ref = EstimateOf(*job, n, sd, base_end);
      if (ref.samples_per_s > 0.0 && std::abs(rate / ref.samples_per_s - 1.0) > options.drift_threshold) {
        ++sd.drift_count;
      } else {
        sd.drift_count = 0;
      }
    }
    sd.intervals.push_back(iv);
    if (sd.drift_count >= options.drift_intervals) {
      // Confirmed drift: drop the older data at this size, discount it at the others.
      sd.intervals.erase(sd.intervals.begin(), sd.intervals.end() - sd.drift_count);
      sd.drift_count = 0;
      for (auto& [m, other] : job->sizes) {
        if (m == n) continue;
        for (Interval& o : other.intervals) o.mult *= options.drift_discount;
        other.intervals.erase(std::remove_if(other.intervals.begin(), other.intervals.end(),
                                             [](const Interval& o) { return !(o.mult > 1e-6); }),
                              other.intervals.end());
        other.drift_count = 0;
      }
    }
    // Bounded memory: merge the two oldest intervals (never inside the current run of deviations).
    while (static_cast<int>(sd.intervals.size()) > options.max_intervals_per_size &&
           sd.intervals.size() - sd.drift_count >= 2) {
      Interval& a = sd.intervals[0];
      const Interval& b = sd.intervals[1];
      const double d = a.duration_s + b.duration_s;
      // Exponential ageing makes the merge exact: fold a's extra age into its multiplier.
      double age_a = 1.0;
      if (options.half_life_s > 0.0 && std::isfinite(options.half_life_s))
        age_a = std::exp2(-(b.t_end - a.t_end) / options.half_life_s);
      a.mult = (a.mult * age_a * a.duration_s + b.mult * b.duration_s) / d;
      a.duration_s = d;
      a.samples += b.samples;
      a.t_end = b.t_end;
      sd.intervals.erase(sd.intervals.begin() + 1);
    }
    for (auto it = job->sizes.begin(); it != job->sizes.end();) {
      if (it->second.intervals.empty() && it->first != n) {
        it = job->sizes.erase(it);
      } else {
        ++it;
      }
    }
  }
};

ProfilingAdvisor::ProfilingAdvisor(AdvisorOptions options) : impl_(std::make_unique<Impl>()) {
  std::string error;
  if (!options.IsValid(&error)) throw InvalidArgument(error);
  impl_->options = std::move(options);
}
ProfilingAdvisor::~ProfilingAdvisor() = default;
ProfilingAdvisor::ProfilingAdvisor(ProfilingAdvisor&&) noexcept = default;
ProfilingAdvisor& ProfilingAdvisor::operator=(ProfilingAdvisor&&) noexcept = default;
ProfilingAdvisor::ProfilingAdvisor(const ProfilingAdvisor& other)
    : impl_(std::make_unique<Impl>(*other.impl_)) {}
ProfilingAdvisor& ProfilingAdvisor::operator=(const ProfilingAdvisor& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}

const AdvisorOptions& ProfilingAdvisor::options() const { return impl_->options; }

void ProfilingAdvisor::Report(const std::string& job_id, double time_s, int nodes, double cumulative_samples,
                              std::optional<RescaleMethod> method) {
  const std::string where = "progress report for job '" + job_id + "'";
  if (job_id.empty()) throw InvalidArgument("progress report: empty job id");
  if (method && *method != RescaleMethod::kRelaunch && *method != RescaleMethod::kInPlace)
    throw InvalidArgument(where + ": unknown rescale method " + std::to_string(static_cast<int>(*method)));
  if (!std::isfinite(time_s)) throw InvalidArgument(where + ": time_s " + Num(time_s) + " is not finite");
  if (nodes < 0) throw InvalidArgument(where + ": node count " + std::to_string(nodes) + " is negative");
  if (!std::isfinite(cumulative_samples) || cumulative_samples < 0.0)
    throw InvalidArgument(where + ": cumulative_samples " + Num(cumulative_samples) +
                          " is not a finite non-negative number");
  if (cumulative_samples > kMaxReportedSamples)
    throw InvalidArgument(where + ": cumulative_samples " + Num(cumulative_samples) + " exceeds " +
                          Num(kMaxReportedSamples));
  if (std::abs(time_s) > kMaxReportTimeS)
    throw InvalidArgument(where + ": time_s " + Num(time_s) + " is beyond +-" + Num(kMaxReportTimeS) + " s");
  const auto found = impl_->jobs.find(job_id);
  if (found != impl_->jobs.end() && found->second.has_report) {
    const JobState& j = found->second;
    if (time_s < j.last_t)
      throw InvalidArgument(where + ": time_s " + Num(time_s) + " is before the previous report's " +
                            Num(j.last_t));
    if (cumulative_samples < j.last_cum)
      throw InvalidArgument(where + ": cumulative_samples " + Num(cumulative_samples) +
                            " is below the previous report's " + Num(j.last_cum));
  }
  JobState& job = impl_->jobs[job_id];
  const AdvisorOptions& opt = impl_->options;
  bool changed = false;
  if (!job.has_report) {
    job.has_report = true;
    job.nodes = nodes;
    job.seg_t = time_s;
    job.seg_cum = cumulative_samples;
    job.seg_from = 0;
    job.seg_intervals = 0;
    job.overhead_pending = nodes > 0;
    job.seg_method = method.value_or(RescaleMethod::kRelaunch);
  } else {
    const double dt = time_s - job.last_t;
    const double ds = cumulative_samples - job.last_cum;
    if (dt > 0.0 && job.nodes > 0) {
      ++job.seg_intervals;
      const bool warm = job.last_t < job.seg_t + opt.warmup_s || job.seg_intervals <= opt.warmup_intervals ||
                        !job.seg_progressed;
      if (ds > 0.0) job.seg_progressed = true;
      if (!warm) {
        impl_->AddSteady(&job, job.nodes, {time_s, dt, ds, 1.0});
        changed = true;
        if (job.overhead_pending) {
          // Observed overhead: the warm-up time minus the time the steady rate needs for its samples.
          const SizeData& sd = job.sizes[job.nodes];
          const SizeEstimate e = impl_->EstimateOf(job, job.nodes, sd, sd.intervals.size());
          if (e.samples_per_s > 0.0 && !job.seg_compound) {
            const double lost = (job.last_t - job.seg_t) - (job.last_cum - job.seg_cum) / e.samples_per_s;
            job.rescales.push_back({job.seg_t, job.seg_from, job.nodes, std::max(0.0, lost),
                                    std::max(0.0, lost) * e.samples_per_s, job.seg_method});
            if (static_cast<int>(job.rescales.size()) > kMaxRescalesKept)
              job.rescales.erase(job.rescales.begin());
          }
          job.overhead_pending = false;
        }
      }
    }
    if (nodes != job.nodes) {
      job.seg_compound = job.overhead_pending && job.nodes > 0;
      job.seg_t = time_s;
      job.seg_cum = cumulative_samples;
      job.seg_from = job.nodes;
      job.seg_intervals = 0;
      job.seg_progressed = false;
      job.overhead_pending = nodes > 0;
      job.nodes = nodes;
      job.seg_method = method.value_or(RescaleMethod::kRelaunch);
    } else if (method && job.overhead_pending) {
      job.seg_method = *method;  // the rescale being measured finished by another method (a fallback)
    }
  }
  job.last_t = time_s;
  job.last_cum = cumulative_samples;
  // Ageing depends on the latest report time, so the estimates are refreshed on every new interval.
  if (changed || !job.estimates.empty()) impl_->Refresh(&job);
  if (changed) impl_->ShareWithModel(job, job.nodes);
}

void ProfilingAdvisor::SetPrior(const std::string& job_id, double samples_per_node_s) {
  if (job_id.empty()) throw InvalidArgument("advisor prior: empty job id");
  if (!(samples_per_node_s > 0.0) || !std::isfinite(samples_per_node_s))
    throw InvalidArgument("advisor prior for job '" + job_id + "': samples_per_node_s " +
                          Num(samples_per_node_s) + " is not a finite positive number");
  JobState& job = impl_->jobs[job_id];
  job.has_prior = true;
  job.prior = samples_per_node_s;
}

void ProfilingAdvisor::SetModel(const std::string& job_id, const std::string& model) {
  if (job_id.empty()) throw InvalidArgument("advisor model: empty job id");
  JobState& job = impl_->jobs[job_id];
  job.model = model;
  impl_->ShareWithModel(job, 0);
}

AdvisorCurves ProfilingAdvisor::Curves(const std::string& job_id, int max_nodes, Objective objective) const {
  if (max_nodes < 1)
    throw InvalidArgument("throughput estimate for job '" + job_id + "': max_nodes " +
                          std::to_string(max_nodes) + " must be >= 1");
  const JobState* job = impl_->Find(job_id);
  // Breakpoints: the sparse grid, every measured size, and the kinks of the extrapolation rule.
  std::vector<long long> extra;
  double scale = 1.0;
  if (const ModelState* prior = impl_->ModelPrior(job, &scale)) {
    for (const auto& [size, rate] : prior->rates) extra.push_back(size);
    if (prior->fit_ok) {
      const double cap = prior->fit.max_nodes * prior->fit.options.extrapolation_limit;
      if (cap < 4e9)
        extra.insert(extra.end(),
                     {static_cast<long long>(std::floor(cap)), static_cast<long long>(std::ceil(cap))});
    }
  }
  if (job != nullptr) {
    for (const SizeEstimate& e : job->estimates) extra.push_back(e.nodes);
    if (job->fit_ok) {
      const double cap = job->fit.max_nodes * job->fit.options.extrapolation_limit;
      if (cap < 4e9)
        extra.insert(extra.end(),
                     {static_cast<long long>(std::floor(cap)), static_cast<long long>(std::ceil(cap))});
    }
  }
  std::vector<int> nodes = internal::SparseGrid(max_nodes, extra);
  std::vector<double> est(nodes.size()), obj(nodes.size());
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const int n = nodes[k];
    est[k] = std::max(0.0, impl_->Estimate(job, n));
    obj[k] = n >= 1 ? est[k] * (1.0 + impl_->options.exploration_bonus * impl_->RelSd(job, n)) : est[k];
  }
  if (objective == Objective::kSpeedup) {
    // The unit is the job's own estimate at 1 node, as uncertain as the rest of the curve; the
    // bonus stays on the numerator, so exploration is valued in the same relative terms as for
    // throughput.
    const double one = impl_->Estimate(job, 1);
    if (one > 0.0)
      for (double& v : obj) v /= one;
  }
  AdvisorCurves out;
  out.throughput = ThroughputCurve(nodes, std::move(est));
  out.objective = ThroughputCurve(std::move(nodes), std::move(obj));
  return out;
}

ThroughputCurve ProfilingAdvisor::ThroughputEstimate(const std::string& job_id, int max_nodes) const {
  return Curves(job_id, max_nodes).throughput;
}

ThroughputCurve ProfilingAdvisor::ObjectiveCurve(const std::string& job_id, int max_nodes,
                                                 Objective objective) const {
  return Curves(job_id, max_nodes, objective).objective;
}

double ProfilingAdvisor::RelativeUncertainty(const std::string& job_id, int n) const {
  if (n < 1)
    throw InvalidArgument("relative uncertainty for job '" + job_id + "': node count " + std::to_string(n) +
                          " must be >= 1");
  return impl_->RelSd(impl_->Find(job_id), n);
}

std::vector<ProbeSuggestion> ProfilingAdvisor::ProbeSuggestions(const std::string& job_id, int max_nodes,
                                                                int max_suggestions) const {
  if (max_nodes < 1)
    throw InvalidArgument("probe suggestions for job '" + job_id + "': max_nodes " +
                          std::to_string(max_nodes) + " must be >= 1");
  if (max_suggestions < 0)
    throw InvalidArgument("probe suggestions for job '" + job_id + "': max_suggestions must be >= 0");
  const JobState* job = impl_->Find(job_id);
  // Candidates: powers of two up to max_nodes, max_nodes itself, and the geometric midpoints
  // between consecutive measured sizes; minus the measured sizes.
  std::vector<int> cand;
  for (int n = 1; n <= max_nodes; n *= 2) {
    cand.push_back(n);
    if (n > max_nodes / 2) break;
  }
  cand.push_back(max_nodes);
  if (job != nullptr) {
    for (std::size_t i = 1; i < job->estimates.size(); ++i) {
      const int mid = static_cast<int>(
          std::lround(std::sqrt(1.0 * job->estimates[i - 1].nodes * job->estimates[i].nodes)));
      if (mid >= 1 && mid <= max_nodes) cand.push_back(mid);
    }
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  std::vector<ProbeSuggestion> out;
  for (int n : cand) {
    if (job != nullptr && impl_->Measured(*job, n) != nullptr) continue;
    ProbeSuggestion p;
    p.nodes = n;
    p.predicted_samples_per_s = impl_->Estimate(job, n);
    p.rel_sd = impl_->RelSd(job, n);
    p.score = p.predicted_samples_per_s * p.rel_sd;
    out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ProbeSuggestion& a, const ProbeSuggestion& b) { return a.score > b.score; });
  if (static_cast<int>(out.size()) > max_suggestions) out.resize(max_suggestions);
  return out;
}

JobProfile ProfilingAdvisor::Profile(const std::string& job_id) const {
  const JobState* job = impl_->Find(job_id);
  if (job == nullptr) throw InvalidArgument("advisor: unknown job '" + job_id + "'");
  JobProfile p;
  p.job_id = job_id;
  p.current_nodes = job->nodes;
  p.last_report_s = job->last_t;
  p.cumulative_samples = job->last_cum;
  p.sizes = job->estimates;
  p.rescales = job->rescales;
  for (RescaleMethod method : kRescaleMethods) {
    RescaleCosts c;
    c.method = method;
    for (const RescaleOverhead& r : job->rescales) {
      if (r.from_nodes <= 0 || r.method != method) continue;  // a start, not a rescale; or another method
      // The allocator charges at the old size's rate; where that rate is 0 any value charges nothing.
      const double from_rate = impl_->Estimate(job, r.from_nodes);
      const double charged_s = from_rate > 0.0 ? r.lost_samples / from_rate : r.overhead_s;
      if (r.to_nodes > r.from_nodes) {
        c.mean_scale_up_s += charged_s;
        ++c.scale_ups;
      } else if (r.to_nodes < r.from_nodes) {
        c.mean_scale_down_s += charged_s;
        ++c.scale_downs;
      }
    }
    if (c.scale_ups > 0) c.mean_scale_up_s /= c.scale_ups;
    if (c.scale_downs > 0) c.mean_scale_down_s /= c.scale_downs;
    p.costs.push_back(c);
  }
  p.fit = job->fit;
  p.has_prior = job->has_prior;
  p.prior_samples_per_node_s = impl_->PriorRate(job);
  p.model = job->model;
  return p;
}

bool ProfilingAdvisor::HasJob(const std::string& job_id) const { return impl_->Find(job_id) != nullptr; }

std::vector<std::string> ProfilingAdvisor::Jobs() const {
  std::vector<std::string> ids;
  for (const auto& [id, job] : impl_->jobs) ids.push_back(id);
  return ids;
}

void ProfilingAdvisor::Forget(const std::string& job_id) { impl_->jobs.erase(job_id); }

std::string ProfilingAdvisor::Save() const { return internal::SaveState(*impl_); }

ProfilingAdvisor ProfilingAdvisor::Load(const std::string& state) {
  bool version1 = false;
  internal::AdvisorState parsed = internal::LoadState(state, &version1);
  ProfilingAdvisor adv(parsed.options);
  static_cast<internal::AdvisorState&>(*adv.impl_) = std::move(parsed);
  for (auto& [name, model] : adv.impl_->models) adv.impl_->RefitModel(&model);
  for (auto& [id, j] : adv.impl_->jobs) {
    adv.impl_->Refresh(&j);
    if (version1)
      for (RescaleOverhead& r : j.rescales)
        r.lost_samples = r.overhead_s * adv.impl_->Estimate(&j, r.to_nodes);
  }
  return adv;
}

void MeasuredRescaleCosts(const JobProfile& profile, double* scale_up_s, double* scale_down_s,
                          RescaleMethod method) {
  const RescaleCosts& c = profile.MethodCosts(method);
  if (c.scale_ups > 0) *scale_up_s = c.mean_scale_up_s;
  if (c.scale_downs > 0) *scale_down_s = c.mean_scale_down_s;
}

}  // namespace bft::curve
