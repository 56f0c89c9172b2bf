// What the scheduler-log importers share (import_common.h).
#include "sim/trace/import_common.h"

#include <algorithm>
#include <charconv>

#include "common/text_io.h"
#include "sim/trace/text_input.h"

namespace bft::sim::detail {

using text::Shorten;

Trace BuildTrace(const std::vector<std::string>& machine_nodes, const std::vector<Occupancy>& held,
                 std::int64_t start_s, std::int64_t end_s) {
  struct Change {
    std::int64_t time_s;
    NodeId node;
    int delta;
  };
  std::vector<Change> changes;
  std::vector<int> holders(machine_nodes.size(), 0);
  for (const Occupancy& o : held) {
    if (o.start_s > end_s || (o.end_s && *o.end_s <= start_s)) continue;
    const bool ends_in_window = o.end_s && *o.end_s <= end_s;
    if (changes.size() + 2 * o.nodes.size() > kMaxImportTransitions) {
      throw InvalidArgument("the log's jobs would give more than " + std::to_string(kMaxImportTransitions) +
                            " transitions, the most an import makes (kMaxImportTransitions): import a "
                            "shorter window or fewer machine nodes");
    }
    for (const NodeId n : o.nodes) {
      if (o.start_s <= start_s) {
        ++holders[static_cast<std::size_t>(n)];
      } else {
        changes.push_back({o.start_s, n, +1});
      }
      if (ends_in_window) changes.push_back({*o.end_s, n, -1});
    }
  }
  std::stable_sort(changes.begin(), changes.end(),
                   [](const Change& a, const Change& b) { return a.time_s < b.time_s; });

  Trace trace;
  std::vector<NodeId> trace_id(machine_nodes.size(), -1);  // machine index -> trace NodeId
  std::vector<bool> busy(machine_nodes.size(), true);      // the trace's rule: busy before the first line
  auto settle = [&](std::int64_t time_s, const std::vector<NodeId>& nodes) {
    for (const NodeId n : nodes) {
      const auto i = static_cast<std::size_t>(n);
      const bool now_busy = holders[i] > 0;
      if (now_busy == busy[i]) continue;
      busy[i] = now_busy;
      if (trace_id[i] < 0) {
        trace_id[i] = static_cast<NodeId>(trace.node_names.size());
        trace.node_names.push_back(machine_nodes[i]);
      }
      trace.transitions.push_back(
          {time_s - start_s, trace_id[i], now_busy ? NodeState::kBusy : NodeState::kIdle});
    }
  };
  // The start: changes at start_s are part of the initial state.
  std::size_t k = 0;
  for (; k < changes.size() && changes[k].time_s == start_s; ++k) {
    holders[static_cast<std::size_t>(changes[k].node)] += changes[k].delta;
  }
  std::vector<NodeId> touched(machine_nodes.size());
  for (std::size_t i = 0; i < touched.size(); ++i) touched[i] = static_cast<NodeId>(i);
  settle(start_s, touched);
  while (k < changes.size()) {
    const std::int64_t t = changes[k].time_s;
    touched.clear();
    for (; k < changes.size() && changes[k].time_s == t; ++k) {
      holders[static_cast<std::size_t>(changes[k].node)] += changes[k].delta;
      touched.push_back(changes[k].node);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    settle(t, touched);
  }
  std::string error;
  if (!trace.IsValid(&error)) throw Error("importer produced an invalid trace: " + error);
  return trace;
}

std::unordered_map<std::string, NodeId> IndexMachineNodes(const std::vector<std::string>& names) {
  if (names.empty()) throw InvalidArgument("machine_nodes: empty (list every node of the machine)");
  if (names.size() > kMaxMachineNodes) {
    throw InvalidArgument("machine_nodes: " + std::to_string(names.size()) + " nodes, more than 1,000,000");
  }
  std::unordered_map<std::string, NodeId> index;
  index.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string why;
    if (!detail::ValidNodeName(names[i], &why)) {
      throw InvalidArgument("machine_nodes[" + std::to_string(i) + "]: " + why);
    }
    if (!index.emplace(names[i], static_cast<NodeId>(i)).second) {
      throw InvalidArgument("machine_nodes[" + std::to_string(i) + "]: node \"" + Shorten(names[i]) +
                            "\" is listed twice");
    }
  }
  return index;
}

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = line.find(sep, pos);
    out.push_back(line.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) return out;
    pos = end + 1;
  }
}

bool ParseInt64(std::string_view text, std::int64_t* value) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace bft::sim::detail
