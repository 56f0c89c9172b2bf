// The profiling advisor's state as data, shared by the advisor (profiling_advisor.cpp) and its
// versioned save format (profiling_save.cpp), so that the format lives in a file of its own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bft/profiling.h"

namespace bft::curve::internal {

struct Interval {
  double t_end = 0.0;
  double duration_s = 0.0;
  double samples = 0.0;
  double mult = 1.0;  // drift discount
};

struct SizeData {
  std::vector<Interval> intervals;  // oldest first
  int drift_count = 0;              // consecutive deviating intervals at the end of `intervals`
};

struct JobState {
  bool has_report = false;
  int nodes = 0;
  double last_t = 0.0;
  double last_cum = 0.0;
  // The current segment: since the last rescale (or the first report).
  double seg_t = 0.0;
  double seg_cum = 0.0;
  int seg_from = 0;
  int seg_intervals = 0;
  bool overhead_pending = false;
  // An interval of the current segment has shown progress: until one has, the segment is still
  // stalled (a restart), so the interval in which progress resumes is warm-up too.
  bool seg_progressed = false;
  // The segment began while the previous rescale's overhead was still unmeasured (e.g. a
  // preemption and a regrowth at the same moment): its stall mixes both losses, so it is not
  // recorded as the cost of this rescale.
  bool seg_compound = false;
  RescaleMethod seg_method = RescaleMethod::kRelaunch;  // how the rescale that began the segment was done
  bool has_prior = false;
  double prior = 0.0;
  std::string model;  // SetModel: jobs of one model share what they measured ("" = none)
  std::map<int, SizeData> sizes;
  std::vector<RescaleOverhead> rescales;
  // Derived (recomputed after every change): the per-size estimates and the fit.
  std::vector<SizeEstimate> estimates;
  FitResult fit;
  bool fit_ok = false;
};

// What the jobs of one model measured: at each size, the latest steady estimate of any of them
// (kept after the jobs are forgotten), and the curve fitted through it.
struct ModelState {
  std::map<int, double> rates;
  FitResult fit;
  bool fit_ok = false;
};

// Everything Save() writes: the options, each model's shared rates and each job's reports.
struct AdvisorState {
  AdvisorOptions options;
  std::map<std::string, JobState> jobs;
  std::map<std::string, ModelState> models;
};

// The text of ProfilingAdvisor::Save (docs/curve.md, "State").
std::string SaveState(const AdvisorState& state);
// Parses SaveState's text of any version; throws bft::ParseError ("advisor state:line"). The
// derived fields (estimates, fits) are left for the caller to recompute; *version1 says the state
// kept no lost samples per rescale (the caller estimates them from the rates).
AdvisorState LoadState(const std::string& text, bool* version1);

}  // namespace bft::curve::internal
