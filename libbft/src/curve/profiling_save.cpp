// The profiling advisor's versioned save format (ProfilingAdvisor::Save/Load; docs/curve.md,
// "State"): a line-oriented text. Numbers are written with 17 significant digits (exact round
// trip); job ids are percent-encoded (every byte outside [A-Za-z0-9._-]).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "bft/error.h"
#include "profiling_state.h"

namespace bft::curve::internal {
namespace {

std::string D(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string Encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// 2: rescales carry lost samples; 3: jobs carry whether the segment progressed and is compound,
// and the models' shared rates and the jobs' models (model, jobmodel lines); 4: rescales and jobs
// (their segment's rescale) carry the rescale method.
constexpr const char* kHeader = "bft-profiling-advisor 4";
constexpr const char* kHeaderVersion3 = "bft-profiling-advisor 3";
constexpr const char* kHeaderVersion2 = "bft-profiling-advisor 2";
constexpr const char* kHeaderVersion1 = "bft-profiling-advisor 1";
const char* const kWhere = "advisor state";

std::string Decode(const std::string& s, long line) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      throw ParseError(kWhere, line, "bad percent-encoding in job id '" + s + "'");
    out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

}  // namespace

std::string SaveState(const AdvisorState& state) {
  const AdvisorOptions& o = state.options;
  std::ostringstream os;
  os << kHeader << "\n";
  os << "options " << D(o.warmup_s) << ' ' << o.warmup_intervals << ' ' << D(o.half_life_s) << ' '
     << D(o.drift_threshold) << ' ' << o.drift_intervals << ' ' << D(o.drift_discount) << ' '
     << o.max_intervals_per_size << ' ' << D(o.prior_samples_per_node_s) << ' ' << D(o.single_interval_rel_sd)
     << ' ' << D(o.rel_sd_per_doubling) << ' ' << D(o.exploration_bonus) << "\n";
  os << "fit " << ToString(o.fit.model) << ' ' << ToString(o.fit.selection) << ' ' << o.fit.max_iterations
     << ' ' << D(o.fit.tolerance) << ' ' << D(o.fit.duplicate_tolerance) << ' '
     << D(o.fit.extrapolation_discount) << ' ' << D(o.fit.extrapolation_limit) << "\n";
  for (const auto& [name, model] : state.models)
    for (const auto& [n, rate] : model.rates)
      os << "model " << Encode(name) << ' ' << n << ' ' << D(rate) << "\n";
  for (const auto& [id, j] : state.jobs) {
    os << "job " << Encode(id) << ' ' << j.has_report << ' ' << j.nodes << ' ' << D(j.last_t) << ' '
       << D(j.last_cum) << ' ' << D(j.seg_t) << ' ' << D(j.seg_cum) << ' ' << j.seg_from << ' '
       << j.seg_intervals << ' ' << j.overhead_pending << ' ' << j.has_prior << ' ' << D(j.prior) << ' '
       << j.seg_progressed << ' ' << j.seg_compound << ' ' << ToString(j.seg_method) << "\n";
    if (!j.model.empty()) os << "jobmodel " << Encode(j.model) << "\n";
    for (const auto& [n, sd] : j.sizes) {
      os << "size " << n << ' ' << sd.drift_count << ' ' << sd.intervals.size() << "\n";
      for (const Interval& iv : sd.intervals)
        os << "iv " << D(iv.t_end) << ' ' << D(iv.duration_s) << ' ' << D(iv.samples) << ' ' << D(iv.mult)
           << "\n";
    }
    for (const RescaleOverhead& r : j.rescales)
      os << "rescale " << D(r.time_s) << ' ' << r.from_nodes << ' ' << r.to_nodes << ' ' << D(r.overhead_s)
         << ' ' << D(r.lost_samples) << ' ' << ToString(r.method) << "\n";
  }
  os << "end\n";
  return os.str();
}

AdvisorState LoadState(const std::string& state, bool* version1_out) {
  std::istringstream in(state);
  std::string text;
  long line = 0;
  auto next = [&](bool required) {
    while (std::getline(in, text)) {
      ++line;
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (!text.empty()) return true;
    }
    if (required) throw ParseError(kWhere, line + 1, "unexpected end of input (missing 'end')");
    return false;
  };
  auto fields = [&](const char* tag, std::size_t count) {
    std::istringstream ls(text);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    if (f.empty() || f[0] != tag || f.size() != count + 1)
      throw ParseError(kWhere, line,
                       std::string("expected '") + tag + "' with " + std::to_string(count) +
                           " fields, got '" + text + "'");
    return f;
  };
  auto num = [&](const std::string& s) {
    try {
      std::size_t pos = 0;
      const double v = std::stod(s, &pos);
      if (pos != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      throw ParseError(kWhere, line, "'" + s + "' is not a number");
    }
  };
  auto integer = [&](const std::string& s) {
    const double v = num(s);
    if (v != std::floor(v) || std::abs(v) > 2e9)
      throw ParseError(kWhere, line, "'" + s + "' is not an integer");
    return static_cast<int>(v);
  };
  auto finite = [&](double v, const char* what) {
    if (!std::isfinite(v)) throw ParseError(kWhere, line, std::string(what) + " is not finite");
    return v;
  };
  auto method = [&](const std::string& s) {
    try {
      return RescaleMethodFromString(s);
    } catch (const InvalidArgument& e) {
      throw ParseError(kWhere, line, e.what());
    }
  };
  if (!next(false) ||
      (text != kHeader && text != kHeaderVersion3 && text != kHeaderVersion2 && text != kHeaderVersion1))
    throw ParseError(kWhere, std::max(line, 1L),
                     std::string("not an advisor state (expected '") + kHeader + "')");
  const bool version1 = text == kHeaderVersion1;
  const bool version4 = text == kHeader;
  const bool version3 = version4 || text == kHeaderVersion3;
  next(true);
  auto f = fields("options", 11);
  AdvisorOptions o;
  o.warmup_s = num(f[1]);
  o.warmup_intervals = integer(f[2]);
  o.half_life_s = num(f[3]);
  o.drift_threshold = num(f[4]);
  o.drift_intervals = integer(f[5]);
  o.drift_discount = num(f[6]);
  o.max_intervals_per_size = integer(f[7]);
  o.prior_samples_per_node_s = num(f[8]);
  o.single_interval_rel_sd = num(f[9]);
  o.rel_sd_per_doubling = num(f[10]);
  o.exploration_bonus = num(f[11]);
  next(true);
  f = fields("fit", 7);
  try {
    o.fit.model = ModelFromString(f[1]);
    o.fit.selection = SelectionFromString(f[2]);
  } catch (const InvalidArgument& e) {
    throw ParseError(kWhere, line, e.what());
  }
  o.fit.max_iterations = integer(f[3]);
  o.fit.tolerance = num(f[4]);
  o.fit.duplicate_tolerance = num(f[5]);
  o.fit.extrapolation_discount = num(f[6]);
  o.fit.extrapolation_limit = num(f[7]);
  std::string error;
  if (!o.IsValid(&error)) throw ParseError(kWhere, line, error);
  AdvisorState adv;
  adv.options = o;
  JobState* job = nullptr;
  SizeData* size = nullptr;
  std::size_t size_left = 0;
  while (true) {
    next(true);
    const std::string tag = text.substr(0, text.find(' '));
    if (size_left > 0 && tag != "iv")
      throw ParseError(kWhere, line, "expected " + std::to_string(size_left) + " more 'iv' lines");
    if (tag == "end") break;
    if (tag == "job") {
      f = fields("job", version4 ? 15 : version3 ? 14 : 12);
      const std::string id = Decode(f[1], line);
      if (id.empty() || adv.jobs.count(id) != 0)
        throw ParseError(kWhere, line, "empty or repeated job id '" + id + "'");
      job = &adv.jobs[id];
      job->has_report = integer(f[2]) != 0;
      job->nodes = integer(f[3]);
      job->last_t = finite(num(f[4]), "last_t");
      job->last_cum = finite(num(f[5]), "last_cum");
      job->seg_t = finite(num(f[6]), "seg_t");
      job->seg_cum = finite(num(f[7]), "seg_cum");
      job->seg_from = integer(f[8]);
      job->seg_intervals = integer(f[9]);
      job->overhead_pending = integer(f[10]) != 0;
      job->has_prior = integer(f[11]) != 0;
      job->prior = finite(num(f[12]), "prior");
      // Older states knew neither: their segment counts as progressing and not compound (the old rule).
      job->seg_progressed = version3 ? integer(f[13]) != 0 : true;
      job->seg_compound = version3 && integer(f[14]) != 0;
      // Older states knew only relaunches.
      job->seg_method = version4 ? method(f[15]) : RescaleMethod::kRelaunch;
      if (job->nodes < 0 || job->seg_from < 0 || job->last_cum < 0.0 ||
          (job->has_prior && !(job->prior > 0.0)))
        throw ParseError(kWhere, line, "invalid job state for '" + id + "'");
    } else if (tag == "model") {
      f = fields("model", 3);
      const std::string name = Decode(f[1], line);
      const int n = integer(f[2]);
      const double rate = finite(num(f[3]), "model rate");
      if (name.empty() || n < 1 || !(rate > 0.0))
        throw ParseError(kWhere, line, "invalid model line '" + text + "'");
      if (!adv.models[name].rates.emplace(n, rate).second)
        throw ParseError(kWhere, line, "repeated size " + std::to_string(n) + " of model '" + name + "'");
    } else if (tag == "jobmodel") {
      if (job == nullptr) throw ParseError(kWhere, line, "'jobmodel' before any 'job'");
      f = fields("jobmodel", 1);
      job->model = Decode(f[1], line);
    } else if (tag == "size") {
      if (job == nullptr) throw ParseError(kWhere, line, "'size' before any 'job'");
      f = fields("size", 3);
      const int n = integer(f[1]);
      const int count = integer(f[3]);
      if (n < 1 || count < 0 || job->sizes.count(n) != 0)
        throw ParseError(kWhere, line, "invalid or repeated size");
      size = &job->sizes[n];
      size->drift_count = integer(f[2]);
      if (size->drift_count < 0 || size->drift_count > count)
        throw ParseError(kWhere, line, "invalid drift count");
      size_left = static_cast<std::size_t>(count);
    } else if (tag == "iv") {
      if (size == nullptr || size_left == 0) throw ParseError(kWhere, line, "unexpected 'iv' line");
      f = fields("iv", 4);
      Interval iv{finite(num(f[1]), "t_end"), finite(num(f[2]), "duration"), finite(num(f[3]), "samples"),
                  finite(num(f[4]), "mult")};
      if (!(iv.duration_s > 0.0) || iv.samples < 0.0 || iv.mult < 0.0)
        throw ParseError(kWhere, line, "invalid interval");
      size->intervals.push_back(iv);
      --size_left;
    } else if (tag == "rescale") {
      if (job == nullptr) throw ParseError(kWhere, line, "'rescale' before any 'job'");
      f = fields("rescale", version1 ? 4 : version4 ? 6 : 5);
      // Version 1 kept no lost samples: they are estimated below from the rate at to_nodes.
      job->rescales.push_back({finite(num(f[1]), "time"), integer(f[2]), integer(f[3]),
                               finite(num(f[4]), "overhead"),
                               version1 ? 0.0 : finite(num(f[5]), "lost samples"),
                               version4 ? method(f[6]) : RescaleMethod::kRelaunch});
    } else {
      throw ParseError(kWhere, line, "unknown line '" + text + "'");
    }
  }
  *version1_out = version1;
  return adv;
}

}  // namespace bft::curve::internal
