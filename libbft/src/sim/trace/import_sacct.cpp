// The importer of Slurm's accounting log (sacct --parsable2) as an idle-node trace.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/import_common.h"

namespace bft::sim {

using detail::BuildTrace;
using detail::IndexMachineNodes;
using detail::Occupancy;
using detail::Split;
using text::Shorten;

bool SacctImportOptions::IsValid(std::string* error) const {
  try {
    IndexMachineNodes(machine_nodes);
  } catch (const InvalidArgument& e) {
    if (error) *error = e.what();
    return false;
  }
  if (start_s && end_s && *end_s <= *start_s) {
    if (error)
      *error =
          "end_s (" + std::to_string(*end_s) + ") must be after start_s (" + std::to_string(*start_s) + ")";
    return false;
  }
  return true;
}

void ForEachSacctJob(const std::string& path, const std::vector<std::string>& columns,
                     const std::vector<std::string>& optional, std::uint64_t max_names,
                     const std::function<void(SacctJobLine&)>& f) {
  const auto node_list = std::find(columns.begin(), columns.end(), "NodeList");
  if (node_list == columns.end()) throw InvalidArgument("ForEachSacctJob: columns must name NodeList");
  const std::size_t node_column = static_cast<std::size_t>(node_list - columns.begin());
  const std::size_t job_column =
      static_cast<std::size_t>(std::find(columns.begin(), columns.end(), "JobID") - columns.begin());
  std::vector<int> index(columns.size(), -1);  // where each column asked for is in a line
  std::size_t width = 0;                       // fields in the header
  std::uint64_t names_so_far = 0;
  bool header = false;
  SacctJobLine job;
  text::ForEachFileLine(path, [&](std::string_view line, long number) {
    auto fail = [&](const std::string& what) { throw ParseError(path, number, what); };
    if (!header) {
      const std::vector<std::string_view> names = Split(line, '|');
      width = names.size();
      for (std::size_t c = 0; c < columns.size(); ++c) {
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (names[i] != columns[c]) continue;
          if (index[c] >= 0) fail("the header names the column " + columns[c] + " twice");
          index[c] = static_cast<int>(i);
        }
      }
      std::vector<std::string> required, missing;
      for (std::size_t c = 0; c < columns.size(); ++c) {
        if (std::find(optional.begin(), optional.end(), columns[c]) != optional.end()) continue;
        required.push_back(columns[c]);
        if (index[c] < 0) missing.push_back(columns[c]);
      }
      if (!missing.empty()) {
        std::string list, format;
        for (std::size_t k = 0; k < required.size(); ++k) {
          list += (k == 0 ? "" : k + 1 == required.size() ? " and " : ", ") + required[k];
        }
        for (const std::string& c : columns) format += (format.empty() ? "" : ",") + c;
        fail("expected a sacct --parsable2 header naming the columns " + list +
             " (run sacct with --parsable2 " + "--format=" + format + "), found \"" + Shorten(line) + "\"");
      }
      header = true;
      return;
    }
    if (line.empty()) return;
    std::vector<std::string_view> fields = Split(line, '|');
    // --parsable (not --parsable2) ends every line with a '|'.
    if (fields.size() == width + 1 && fields.back().empty()) fields.pop_back();
    if (fields.size() != width) {
      fail("expected " + std::to_string(width) + " '|'-separated fields as in the header, found " +
           std::to_string(fields.size()));
    }
    job.line = number;
    job.fields.assign(columns.size(), std::string());
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (index[c] >= 0) job.fields[c] = std::string(fields[static_cast<std::size_t>(index[c])]);
    }
    const bool has_id = job_column < columns.size() && index[job_column] >= 0;
    if (has_id && job.fields[job_column].find('.') != std::string::npos) return;  // a step, inside its job
    const std::string& nodes_text = job.fields[node_column];
    job.nodes.clear();
    if (!nodes_text.empty() && nodes_text != "None assigned") {
      // The file's names are counted before this line's are made: ExpandHostlist counts first.
      const std::uint64_t left = max_names - names_so_far;
      try {
        job.nodes = ExpandHostlist(nodes_text, static_cast<std::size_t>(std::min<std::uint64_t>(
                                                   left, std::numeric_limits<std::size_t>::max())));
      } catch (const InvalidArgument& e) {
        std::string what = e.what();
        if (left < kMaxMachineNodes && what.find("more than") != std::string::npos) {
          // The file's cap, not the expression's: say how many the file named before this line.
          what = "\"" + Shorten(nodes_text) + "\" would take the file past " + std::to_string(max_names) +
                 " node names (it named " + std::to_string(names_so_far) + " before this line)";
        }
        fail((has_id ? "job " + job.fields[job_column] : std::string("the job")) + ": NodeList: " + what);
      }
      names_so_far += job.nodes.size();
    }
    f(job);
  });
  if (!header) throw ParseError(path, 1, "empty file: expected a sacct --parsable2 header line");
}

ImportedTrace ImportSacct(const std::string& path, const SacctImportOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw InvalidArgument(error);
  const std::unordered_map<std::string, NodeId> machine = IndexMachineNodes(options.machine_nodes);
  ImportedTrace out;
  std::vector<Occupancy> held;
  std::unordered_set<std::string> ignored;
  std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
  std::int64_t latest = std::numeric_limits<std::int64_t>::min();
  // Fields: JobID (optional: it names jobs in messages), Start, End, NodeList.
  const std::vector<std::string> columns = {"JobID", "Start", "End", "NodeList"};
  // The log's node names, counted before each line's are made: at most two transitions each, so a log
  // of more than twice kMaxImportTransitions names is refused at the line that passes it, before its
  // jobs are held (200 lines of n[1-1000000] took minutes and gigabytes to reach BuildTrace's cap).
  ForEachSacctJob(path, columns, {"JobID"}, 2 * static_cast<std::uint64_t>(kMaxImportTransitions),
                  [&](SacctJobLine& job) {
                    auto fail = [&](const std::string& what) { throw ParseError(path, job.line, what); };
                    const std::string name = job.fields[0].empty() ? "the job" : "job " + job.fields[0];
                    const std::string& start_text = job.fields[1];
                    const std::string& end_text = job.fields[2];
                    if (start_text == "Unknown" || start_text == "None" || job.nodes.empty()) {
                      ++out.jobs_skipped;  // never started
                      return;
                    }
                    Occupancy o;
                    try {
                      o.start_s = ParseSacctTime(start_text);
                      if (end_text != "Unknown" && end_text != "None") o.end_s = ParseSacctTime(end_text);
                    } catch (const InvalidArgument& e) {
                      fail(name + ": " + e.what());
                    }
                    if (o.end_s && *o.end_s < o.start_s)
                      fail(name + ": End " + end_text + " is before Start " + start_text);
                    for (const std::string& n : job.nodes) {
                      const auto it = machine.find(n);
                      if (it != machine.end()) {
                        o.nodes.push_back(it->second);
                      } else if (ignored.insert(n).second && out.ignored_examples.size() < 10) {
                        out.ignored_examples.push_back(n);
                      }
                    }
                    if (o.nodes.empty() || (o.end_s && *o.end_s == o.start_s)) {
                      ++out.jobs_skipped;
                      return;
                    }
                    earliest = std::min(earliest, o.start_s);
                    latest = std::max(latest, o.end_s.value_or(o.start_s));
                    held.push_back(std::move(o));
                  });
  out.ignored_nodes = static_cast<std::int64_t>(ignored.size());
  if (held.empty()) {
    throw InvalidArgument(path + ": no job ran on the machine's nodes (" + std::to_string(out.jobs_skipped) +
                          " job lines without nodes or start)");
  }
  out.origin_s = options.start_s.value_or(earliest);
  if (!options.end_s && out.origin_s >= latest) {
    throw InvalidArgument(path + ": the log's last job start or end (" + std::to_string(latest) +
                          ") is not after the window's start (" + std::to_string(out.origin_s) +
                          "): give the end");
  }
  out.end_s = options.end_s.value_or(latest);
  for (const Occupancy& o : held) {
    const bool in_window = o.start_s <= out.end_s && (!o.end_s || *o.end_s > out.origin_s);
    ++(in_window ? out.jobs_used : out.jobs_skipped);
  }
  out.machine_nodes = static_cast<std::int64_t>(options.machine_nodes.size());
  out.trace = BuildTrace(options.machine_nodes, held, out.origin_s, out.end_s);
  if (out.trace.transitions.empty()) {
    throw InvalidArgument(path + ": no node of the machine is idle at any time of the window");
  }
  return out;
}

}  // namespace bft::sim
