// The importer of the Standard Workload Format (the Parallel Workloads Archive's logs) as an
// idle-node trace.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/import_common.h"

namespace bft::sim {
namespace {

// ceil(a / b) for a >= 0, b >= 1, without the overflow of (a + b - 1) / b.
std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

using detail::BuildTrace;
using detail::Occupancy;
using detail::ParseInt64;
using text::Shorten;

bool SwfImportOptions::IsValid(std::string* error) const {
  const char* problem = procs_per_node < 1  ? "procs_per_node: must be >= 1"
                        : machine_nodes < 0 ? "machine_nodes: must be >= 1 (or 0: from the header)"
                                            : nullptr;
  if (problem != nullptr && error != nullptr) *error = problem;
  return problem == nullptr;
}

ImportedTrace ImportSwf(const std::string& path, const SwfImportOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw InvalidArgument(error);
  struct Job {
    long line;
    std::int64_t id;
    std::int64_t start_s;
    std::int64_t end_s;
    std::int64_t nodes;
  };
  std::vector<Job> jobs;
  std::optional<std::int64_t> max_nodes;
  std::optional<std::int64_t> max_procs;
  std::unordered_set<std::string_view> keys_seen;  // each header key once: two would leave which one holds
  std::string header_error;  // a bad MaxNodes/MaxProcs: an error only if the machine's size comes from it
  ImportedTrace out;
  text::ForEachFileLine(path, [&](std::string_view line, long number) {
    auto fail = [&](const std::string& what) { throw ParseError(path, number, what); };
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) return;
    if (line[first] == ';') {
      // Header comments such as "; MaxNodes: 128".
      const std::string_view comment = line.substr(first + 1);
      for (auto [key, slot] : {std::pair{std::string_view("MaxNodes:"), &max_nodes},
                               std::pair{std::string_view("MaxProcs:"), &max_procs}}) {
        const std::size_t at = comment.find(key);
        if (at == std::string_view::npos || comment.find_first_not_of(" \t") != at) continue;
        if (!keys_seen.insert(key).second)
          fail("the header gives " + std::string(key.substr(0, key.size() - 1)) + " twice");
        std::string_view value = comment.substr(at + key.size());
        value.remove_prefix(std::min(value.size(), value.find_first_not_of(" \t")));
        value = value.substr(0, value.find_first_of(" \t"));
        std::int64_t v = 0;
        if (ParseInt64(value, &v) && v >= 1) {
          *slot = v;
        } else if (header_error.empty()) {
          header_error = path + ":" + std::to_string(number) + ": " + std::string(key) +
                         " expects a positive whole number, found \"" + Shorten(value) + "\"";
        }
      }
      return;
    }
    std::vector<std::string_view> fields;
    for (std::size_t pos = first; pos < line.size();) {
      const std::size_t end = std::min(line.size(), line.find_first_of(" \t", pos));
      fields.push_back(line.substr(pos, end - pos));
      pos = line.find_first_not_of(" \t", end);
      if (pos == std::string_view::npos) break;
    }
    if (fields.size() != 18) {
      fail("expected the 18 whitespace-separated fields of the Standard Workload Format, found " +
           std::to_string(fields.size()));
    }
    static constexpr const char* kNames[] = {"job number",  "submit time",          "wait time",
                                             "run time",    "allocated processors", "average CPU time",
                                             "used memory", "requested processors"};
    std::int64_t v[8] = {};
    for (std::size_t i = 0; i < 18; ++i) {
      std::int64_t whole = 0;
      double real = 0.0;
      const bool is_int = ParseInt64(fields[i], &whole);
      const auto [ptr, ec] = std::from_chars(fields[i].data(), fields[i].data() + fields[i].size(), real);
      if (ec != std::errc() || ptr != fields[i].data() + fields[i].size()) {
        fail("field " + std::to_string(i + 1) + ": \"" + Shorten(fields[i]) + "\" is not a number");
      }
      if (i < 8 && i != 5 && i != 6) {
        if (!is_int || (whole < 0 && whole != -1)) {
          fail("field " + std::to_string(i + 1) + " (" + kNames[i] +
               "): expected a whole number >= 0 or -1 (unknown), found \"" + Shorten(fields[i]) + "\"");
        }
        v[i] = whole;
      }
    }
    const std::int64_t submit = v[1], wait = v[2], run = v[3];
    if (submit < 0 || wait < 0 || run <= 0) {
      ++out.jobs_skipped;  // it never ran, or when is unknown
      return;
    }
    const std::int64_t procs = v[4] >= 1 ? v[4] : v[7];
    if (procs < 1)
      fail("job " + std::to_string(v[0]) + ": no processor count (fields 5 and 8 are unknown or 0)");
    const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 4;
    if (submit > limit || wait > limit || run > limit)
      fail("job " + std::to_string(v[0]) + ": time out of range");
    jobs.push_back(
        {number, v[0], submit + wait, submit + wait + run, CeilDiv(procs, options.procs_per_node)});
  });
  std::int64_t machine = options.machine_nodes;
  if (machine == 0) {
    if (!header_error.empty()) throw InvalidArgument(header_error);
    if (max_nodes) {
      machine = *max_nodes;
    } else if (max_procs) {
      machine = CeilDiv(*max_procs, options.procs_per_node);
    } else {
      throw InvalidArgument(path +
                            ": the header gives neither MaxNodes nor MaxProcs: give the machine's nodes");
    }
  }
  if (machine > static_cast<std::int64_t>(kMaxMachineNodes)) {
    throw InvalidArgument(path + ": " + std::to_string(machine) + " nodes: at most 1,000,000");
  }
  if (jobs.empty()) throw InvalidArgument(path + ": no job with a start and a run time");

  const std::size_t width = std::to_string(machine - 1).size();
  std::vector<std::string> names(static_cast<std::size_t>(machine));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string digits = std::to_string(i);
    names[i] = "n" + std::string(width - digits.size(), '0') + digits;
  }
  // Placement: by start time (then line), each job takes the lowest-numbered free nodes; jobs that
  // end by a start free their nodes first.
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const Job& a, const Job& b) { return a.start_s < b.start_s; });
  std::set<NodeId> free_nodes;
  for (std::int64_t i = 0; i < machine; ++i) free_nodes.insert(static_cast<NodeId>(i));
  using Running = std::pair<std::int64_t, std::size_t>;  // (end, index into held)
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::vector<Occupancy> held;
  held.reserve(jobs.size());
  std::int64_t latest = 0;
  for (const Job& job : jobs) {
    while (!running.empty() && running.top().first <= job.start_s) {
      for (const NodeId n : held[running.top().second].nodes) free_nodes.insert(n);
      running.pop();
    }
    if (job.nodes > static_cast<std::int64_t>(free_nodes.size())) {
      throw ParseError(path, job.line,
                       "job " + std::to_string(job.id) + " needs " + std::to_string(job.nodes) +
                           " nodes at time " + std::to_string(job.start_s) + " but only " +
                           std::to_string(free_nodes.size()) + " of " + std::to_string(machine) +
                           " are free (check the processors per node and the machine's nodes)");
    }
    Occupancy o{job.start_s, job.end_s, {}};
    for (std::int64_t i = 0; i < job.nodes; ++i) {
      o.nodes.push_back(*free_nodes.begin());
      free_nodes.erase(free_nodes.begin());
    }
    running.emplace(job.end_s, held.size());
    held.push_back(std::move(o));
    latest = std::max(latest, job.end_s);
  }
  out.jobs_used = static_cast<std::int64_t>(held.size());
  out.origin_s = 0;
  out.end_s = latest;
  out.machine_nodes = machine;
  out.trace = BuildTrace(names, held, 0, latest);
  return out;
}

}  // namespace bft::sim
