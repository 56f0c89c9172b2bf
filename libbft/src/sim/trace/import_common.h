// What the scheduler-log importers (import_sacct.cpp, import_swf.cpp) share: the idle-node trace of
// a machine from its jobs' holds on nodes, the machine's node index, and field parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bft/sim.h"

namespace bft::sim::detail {

// One job's hold on nodes: from start_s on the log's clock until end_s; a job still running at the
// end of the log has no end.
struct Occupancy {
  std::int64_t start_s = 0;
  std::optional<std::int64_t> end_s;
  std::vector<NodeId> nodes;  // indices into the machine's node list
};

// The idle-node trace of a machine whose nodes are busy while an occupancy holds them, over the
// window [start_s, end_s] of the log's clock (trace time = log time - start_s). At start_s every
// node not held is idle; then each time's changes, those at end_s included, are applied together,
// so a node freed and taken again at the same second does not change state.
Trace BuildTrace(const std::vector<std::string>& machine_nodes, const std::vector<Occupancy>& held,
                 std::int64_t start_s, std::int64_t end_s);

// The machine's nodes: name -> index; names checked and unique (InvalidArgument naming the entry).
std::unordered_map<std::string, NodeId> IndexMachineNodes(const std::vector<std::string>& names);

// The fields of `line` between separators (an empty line gives one empty field).
std::vector<std::string_view> Split(std::string_view line, char sep);
// True if `text` is a whole int64 in decimal, stored in *value.
bool ParseInt64(std::string_view text, std::int64_t* value);
// True if `s` is non-empty and all decimal digits.
bool IsDigits(std::string_view s);

}  // namespace bft::sim::detail
