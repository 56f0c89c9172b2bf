// The job format: its field tables, the one validator (JobFromFields, JobSpec::IsValid) and the
// workload reader and writer.
#include "bft/jobs.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "bft/profiling.h"
#include "common/text_io.h"
#include "jobs/json.h"

namespace bft::jobs {

using text::Shorten;

namespace {

// JobSpec::IsValid; for Use::kAllocation without submit and work, which the allocator does not read.
bool Check(const JobSpec& spec, Use use, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = "job \"" + spec.name + "\": " + what;
    return false;
  };
  if (spec.name.empty()) {
    if (error) *error = "name: empty job name";
    return false;
  }
  if (use == Use::kWorkload && (!std::isfinite(spec.submit_s) || spec.submit_s < 0)) {
    return fail("submit must be finite and >= 0");
  }
  if (spec.min_nodes < 1) return fail("min_nodes must be >= 1");
  if (spec.max_nodes < spec.min_nodes) return fail("max_nodes must be >= min_nodes");
  if (use == Use::kWorkload) {
    if (!std::isfinite(spec.work) || spec.work <= 0) return fail("work must be finite and > 0");
    if (spec.work > curve::kMaxReportedSamples) {
      return fail("work " + detail::JsonNumber(spec.work) + " exceeds " +
                  detail::JsonNumber(curve::kMaxReportedSamples) +
                  " samples (the progress reports of a learned-curves replay could not carry it)");
    }
  }
  if (!std::isfinite(spec.scale_up_s) || spec.scale_up_s < 0)
    return fail("scale_up_s must be finite and >= 0");
  if (!std::isfinite(spec.scale_down_s) || spec.scale_down_s < 0) {
    return fail("scale_down_s must be finite and >= 0");
  }
  if (!std::isfinite(spec.restart_s) || spec.restart_s < 0) return fail("restart_s must be finite and >= 0");
  if (!std::isfinite(spec.weight) || spec.weight <= 0) return fail("weight must be finite and > 0");
  if (spec.throughput.empty()) return fail("throughput: no breakpoints");
  if (spec.objective.empty()) return fail("objective: no breakpoints");
  // A curve's breakpoints, and samples/s times a replay's seconds must stay finite (1e300 made the
  // summary JSON "Infinity").
  auto check_curve = [&](const std::string& field, const curve::ThroughputCurve& curve) {
    std::string why;
    if (!curve::ThroughputCurve::Check(curve.nodes(), curve.values(), &why)) return fail(field + ": " + why);
    for (const double v : curve.values()) {
      if (v > kMaxSamplesPerS) {
        return fail(field + ": " + detail::JsonNumber(v) + " samples/s exceeds " +
                    detail::JsonNumber(kMaxSamplesPerS));
      }
    }
    return true;
  };
  if (!check_curve("throughput", spec.throughput) || !check_curve("objective", spec.objective)) return false;
  std::unordered_set<std::string> names;
  for (std::size_t k = 0; k < spec.configurations.size(); ++k) {
    const Configuration& c = spec.configurations[k];
    const std::string where = "configurations[" + std::to_string(k) + "]";
    std::string why;
    if (!c.IsValid(&why)) return fail(where + ": " + why);
    if (!names.insert(c.name).second) return fail(where + ": name \"" + c.name + "\" is taken");
    if (c.throughput.empty()) return fail(where + " (\"" + c.name + "\"): throughput: no breakpoints");
    if (!check_curve(where + " (\"" + c.name + "\"): throughput", c.throughput) ||
        !check_curve(where + " (\"" + c.name + "\"): objective", c.objective)) {
      return false;
    }
  }
  return true;
}

// What a value is, for "expected ..., found ..." messages.
std::string Describe(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return "\"" + Shorten(v.text) + "\"";
    case Value::Kind::kNumber:
      return detail::JsonNumber(v.number);
    case Value::Kind::kNumberArray:
      return v.array.empty() ? "an empty array" : "an array of numbers";
    case Value::Kind::kObjectArray:
      return "an array of objects";
    case Value::Kind::kOther:
      break;
  }
  return Shorten(v.text);
}

[[noreturn]] void Fail(const std::string& what) { throw InvalidArgument(what); }

}  // namespace

bool Configuration::IsValid(std::string* error) const {
  auto fail = [&](const std::string& why) {
    if (error != nullptr) *error = why;
    return false;
  };
  if (name.empty()) return fail("name is empty");
  if (name == "full") return fail("name 'full' is taken (it is the job's own curves)");
  if (objective.empty()) return fail("objective curve is empty");
  if (!std::isfinite(efficiency) || !(efficiency > 0.0) || efficiency > 1.0) {
    std::ostringstream os;
    os << "efficiency " << efficiency << " must be in (0, 1]";
    return fail(os.str());
  }
  return true;
}

bool JobSpec::IsValid(std::string* error) const { return Check(*this, Use::kWorkload, error); }

const std::vector<JobField>& ConfigurationFields() {
  static const std::vector<JobField> fields = {
      {"name", true, true},       {"efficiency", true, true}, {"nodes", false, true},
      {"throughput", true, true}, {"objective", false, true},
  };
  return fields;
}

const std::vector<JobField>& JobFields() {
  // The order is the order of the slots in JobFromFields.
  static const std::vector<JobField> fields = {
      {"name", true, true},         {"submit", true, false}, {"min_nodes", true, true},
      {"max_nodes", true, true},    {"work", true, false},   {"scale_up_s", true, true},
      {"scale_down_s", true, true}, {"nodes", true, true},   {"throughput", true, true},
      {"objective", false, true},   {"weight", false, true}, {"configurations", false, true},
      {"restart_s", false, true},
  };
  return fields;
}

JobSpec JobFromFields(const std::vector<Field>& fields, Use use) {
  // Slots in the order of a field table (JobFields(), ConfigurationFields()).
  auto slots = [&](const std::vector<Field>& object, const std::vector<JobField>& table,
                   const std::string& where) {
    std::vector<const Field*> found(table.size(), nullptr);
    for (const Field& f : object) {
      const auto it =
          std::find_if(table.begin(), table.end(), [&](const JobField& e) { return f.key == e.name; });
      if (it == table.end()) {
        std::string known;
        for (const JobField& e : table) known += (known.empty() ? "" : ", ") + std::string(e.name);
        Fail(where + "unknown field \"" + Shorten(f.key) + "\" (known: " + known + ")");
      }
      found[static_cast<std::size_t>(it - table.begin())] = &f;
    }
    return found;
  };
  const std::vector<const Field*> found = slots(fields, JobFields(), "");
  const Field* const name = found[0];
  const Field* const submit = found[1];
  const Field* const min_nodes = found[2];
  const Field* const max_nodes = found[3];
  const Field* const work = found[4];
  const Field* const scale_up = found[5];
  const Field* const scale_down = found[6];
  const Field* const nodes = found[7];
  const Field* const throughput = found[8];
  const Field* const objective = found[9];
  const Field* const weight = found[10];
  const Field* const configurations = found[11];
  const Field* const restart = found[12];
  // `where` prefixes every message about a field: the job, and the configuration for one of its.
  std::string where;
  auto require = [&](const Field* f, const char* key) {
    if (f == nullptr) Fail(where + "missing field \"" + key + "\"");
  };
  auto expected = [&](const Field* f, const char* key, const char* what) {
    Fail(where + "\"" + key + "\": expected " + what + ", found " + Describe(f->value));
  };
  require(name, "name");
  if (name->value.kind != Value::Kind::kString) expected(name, "name", "a string");
  const std::string job = "job \"" + Shorten(name->value.text) + "\": ";
  where = job;
  auto number = [&](const Field* f, const char* key) {
    require(f, key);
    if (f->value.kind != Value::Kind::kNumber) expected(f, key, "a number");
    return f->value.number;
  };
  auto integer = [&](double x, const std::string& what) {
    if (x != std::floor(x) || std::fabs(x) > 1e9) {
      Fail(where + what + ": expected a whole number, found " + detail::JsonNumber(x));
    }
    return static_cast<int>(x);
  };
  auto array = [&](const Field* f, const char* key) -> const std::vector<double>& {
    require(f, key);
    if (f->value.kind != Value::Kind::kNumberArray) expected(f, key, "an array of numbers");
    return f->value.array;
  };
  auto node_counts = [&](const Field* f) {
    const std::vector<double>& values = array(f, "nodes");
    std::vector<int> counts;
    counts.reserve(values.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
      counts.push_back(integer(values[k], "\"nodes\"[" + std::to_string(k) + "]"));
    }
    return counts;
  };
  auto make_curve = [&](const std::vector<int>& counts, const Field* f, const char* key) {
    const std::vector<double>& values = array(f, key);
    if (values.size() != counts.size()) {
      Fail(where + "\"" + key + "\" has " + std::to_string(values.size()) + " values but \"nodes\" has " +
           std::to_string(counts.size()));
    }
    std::string why;
    if (!curve::ThroughputCurve::Check(counts, values, &why)) Fail(where + "\"" + key + "\": " + why);
    return curve::ThroughputCurve(counts, values);
  };
  JobSpec spec;
  spec.name = name->value.text;
  if (spec.name.empty()) Fail("\"name\": empty job name");
  // The allocator does not read submit and work: a job for it may leave them out.
  const bool workload = use == Use::kWorkload;
  if (workload || submit != nullptr) spec.submit_s = number(submit, "submit");
  spec.min_nodes = integer(number(min_nodes, "min_nodes"), "\"min_nodes\"");
  spec.max_nodes = integer(number(max_nodes, "max_nodes"), "\"max_nodes\"");
  if (workload || work != nullptr) spec.work = number(work, "work");
  spec.scale_up_s = number(scale_up, "scale_up_s");
  spec.scale_down_s = number(scale_down, "scale_down_s");
  if (weight != nullptr) spec.weight = number(weight, "weight");
  if (restart != nullptr) spec.restart_s = number(restart, "restart_s");
  const std::vector<int> counts = node_counts(nodes);
  spec.throughput = make_curve(counts, throughput, "throughput");
  spec.objective = objective != nullptr ? make_curve(counts, objective, "objective") : spec.throughput;
  if (configurations != nullptr) {
    // An empty array ([]) reads as numbers: no configurations.
    const Value& value = configurations->value;
    if (value.kind != Value::Kind::kObjectArray &&
        !(value.kind == Value::Kind::kNumberArray && value.array.empty())) {
      expected(configurations, "configurations", "an array of objects");
    }
    for (std::size_t k = 0; k < value.objects.size(); ++k) {
      where = job + "\"configurations\"[" + std::to_string(k) + "]: ";
      const std::vector<const Field*> c = slots(value.objects[k], ConfigurationFields(), where);
      Configuration configuration;
      require(c[0], "name");
      if (c[0]->value.kind != Value::Kind::kString) expected(c[0], "name", "a string");
      configuration.name = c[0]->value.text;
      configuration.efficiency = number(c[1], "efficiency");
      const std::vector<int> own_counts = c[2] != nullptr ? node_counts(c[2]) : counts;
      configuration.throughput = make_curve(own_counts, c[3], "throughput");
      configuration.objective =
          c[4] != nullptr ? make_curve(own_counts, c[4], "objective") : configuration.throughput;
      spec.configurations.push_back(std::move(configuration));
    }
    where = job;
  }
  std::string why;
  if (!Check(spec, use, &why)) Fail(why);
  return spec;
}

namespace {

// The workload reader over any line source: for_each_line(f) calls f(line, number) for every line.
template <typename ForEachLineFn>
std::vector<JobSpec> ParseJobLines(ForEachLineFn&& for_each_line, const std::string& source) {
  std::vector<JobSpec> jobs;
  std::unordered_map<std::string, long> first_line;
  for_each_line([&](std::string_view line, long line_number) {
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;  // blank line: no job
    std::vector<Field> fields;
    try {
      fields = detail::ParseJobJsonObject(line);
    } catch (const detail::JsonError& e) {
      throw ParseError(source, line_number, std::string("malformed JSON: ") + e.what());
    }
    JobSpec spec;
    try {
      spec = JobFromFields(fields, Use::kWorkload);
    } catch (const InvalidArgument& e) {
      throw ParseError(source, line_number, e.what());
    }
    const auto [it, inserted] = first_line.emplace(spec.name, line_number);
    if (!inserted) {
      throw ParseError(source, line_number,
                       "job \"" + Shorten(spec.name) + "\": duplicate job name (first on line " +
                           std::to_string(it->second) + ")");
    }
    jobs.push_back(std::move(spec));
  });
  if (jobs.empty()) throw ParseError(source, 1, "no jobs: the workload is empty (one JSON object per line)");
  return jobs;
}

}  // namespace

std::vector<JobSpec> ParseJobs(const std::string& text, const std::string& source) {
  return ParseJobLines([&](auto&& f) { text::ForEachTextLine(text, source, f); }, source);
}

std::vector<JobSpec> ReadJobs(const std::string& path) {
  return ParseJobLines([&](auto&& f) { text::ForEachFileLine(path, f); }, path);
}

void WriteJobs(const std::vector<JobSpec>& jobs, const std::string& path) {
  std::string out;
  auto numbers = [](const auto& xs) {
    std::string s = "[";
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (k) s += ", ";
      s += detail::JsonNumber(static_cast<double>(xs[k]));
    }
    return s + "]";
  };
  for (const JobSpec& j : jobs) {
    std::string why;
    if (!j.IsValid(&why)) throw InvalidArgument("WriteJobs: " + why);
    if (j.objective.nodes() != j.throughput.nodes()) {
      throw InvalidArgument("WriteJobs: job \"" + j.name +
                            "\": objective and throughput must share breakpoints");
    }
    out += "{\"name\": " + detail::JsonQuote(j.name);
    out += ", \"submit\": " + detail::JsonNumber(j.submit_s);
    out += ", \"min_nodes\": " + std::to_string(j.min_nodes);
    out += ", \"max_nodes\": " + std::to_string(j.max_nodes);
    out += ", \"work\": " + detail::JsonNumber(j.work);
    out += ", \"scale_up_s\": " + detail::JsonNumber(j.scale_up_s);
    out += ", \"scale_down_s\": " + detail::JsonNumber(j.scale_down_s);
    out += ", \"nodes\": " + numbers(j.throughput.nodes());
    out += ", \"throughput\": " + numbers(j.throughput.values());
    out += ", \"objective\": " + numbers(j.objective.values());
    if (j.weight != 1.0) out += ", \"weight\": " + detail::JsonNumber(j.weight);
    if (j.restart_s != 0.0) out += ", \"restart_s\": " + detail::JsonNumber(j.restart_s);
    if (!j.configurations.empty()) {
      out += ", \"configurations\": [";
      for (std::size_t k = 0; k < j.configurations.size(); ++k) {
        const Configuration& c = j.configurations[k];
        if (c.objective.nodes() != c.throughput.nodes()) {
          throw InvalidArgument("WriteJobs: job \"" + j.name + "\": configuration \"" + c.name +
                                "\": objective and throughput must share breakpoints");
        }
        out += (k ? ", " : "");
        out += "{\"name\": " + detail::JsonQuote(c.name);
        out += ", \"efficiency\": " + detail::JsonNumber(c.efficiency);
        out += ", \"nodes\": " + numbers(c.throughput.nodes());
        out += ", \"throughput\": " + numbers(c.throughput.values());
        out += ", \"objective\": " + numbers(c.objective.values()) + "}";
      }
      out += "]";
    }
    out += "}\n";
  }
  text::WriteFileMaybeGzip(path, out);
}

}  // namespace bft::jobs
