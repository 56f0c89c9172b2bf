// The importer of Slurm's accounting log (sacct --parsable2) as an idle-node trace.
#include <algorithm>
#include <cstdint>
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

ImportedTrace ImportSacct(const std::string& path, const SacctImportOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw InvalidArgument(error);
  const std::unordered_map<std::string, NodeId> machine = IndexMachineNodes(options.machine_nodes);
  struct Column {
    const char* name;
    int index = -1;
  };
  Column job_id{"JobID"}, start{"Start"}, end{"End"}, node_list{"NodeList"};
  std::size_t columns = 0;
  ImportedTrace out;
  std::vector<Occupancy> held;
  std::unordered_set<std::string> ignored;
  std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
  std::int64_t latest = std::numeric_limits<std::int64_t>::min();
  bool header = false;
  text::ForEachFileLine(path, [&](std::string_view line, long number) {
    auto fail = [&](const std::string& what) { throw ParseError(path, number, what); };
    if (!header) {
      const std::vector<std::string_view> names = Split(line, '|');
      columns = names.size();
      for (Column* c : {&job_id, &start, &end, &node_list}) {
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (names[i] != c->name) continue;
          if (c->index >= 0) fail("the header names the column " + std::string(c->name) + " twice");
          c->index = static_cast<int>(i);
        }
      }
      if (start.index < 0 || end.index < 0 || node_list.index < 0) {
        fail(
            "expected a sacct --parsable2 header naming the columns Start, End and NodeList (run sacct with "
            "--parsable2 --format=JobID,Start,End,NodeList), found \"" +
            Shorten(line) + "\"");
      }
      header = true;
      return;
    }
    if (line.empty()) return;
    std::vector<std::string_view> fields = Split(line, '|');
    // --parsable (not --parsable2) ends every line with a '|'.
    if (fields.size() == columns + 1 && fields.back().empty()) fields.pop_back();
    if (fields.size() != columns) {
      fail("expected " + std::to_string(columns) + " '|'-separated fields as in the header, found " +
           std::to_string(fields.size()));
    }
    auto field = [&](const Column& c) { return fields[static_cast<std::size_t>(c.index)]; };
    const std::string name = job_id.index >= 0 ? "job " + std::string(field(job_id)) : "the job";
    if (job_id.index >= 0 && field(job_id).find('.') != std::string_view::npos) {
      return;  // a step: it runs inside its job's allocation
    }
    const std::string_view start_text = field(start);
    const std::string_view end_text = field(end);
    const std::string_view nodes_text = field(node_list);
    if (start_text == "Unknown" || start_text == "None" || nodes_text == "None assigned") {
      ++out.jobs_skipped;  // never started
      return;
    }
    Occupancy o;
    try {
      o.start_s = ParseSacctTime(std::string(start_text));
      if (end_text != "Unknown" && end_text != "None") o.end_s = ParseSacctTime(std::string(end_text));
    } catch (const InvalidArgument& e) {
      fail(name + ": " + e.what());
    }
    if (o.end_s && *o.end_s < o.start_s) {
      fail(name + ": End " + std::string(end_text) + " is before Start " + std::string(start_text));
    }
    std::vector<std::string> names;
    try {
      names = ExpandHostlist(std::string(nodes_text));
    } catch (const InvalidArgument& e) {
      fail(name + ": NodeList: " + e.what());
    }
    for (const std::string& n : names) {
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
  if (!header) throw ParseError(path, 1, "empty file: expected a sacct --parsable2 header line");
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
