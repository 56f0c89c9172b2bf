// The reader and writer of the trace format (CSV, optionally gzip).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/text_input.h"

namespace bft::sim {

using detail::ValidNodeName;
using text::Shorten;

namespace detail {

bool ValidNodeName(std::string_view name, std::string* why) {
  if (name.empty()) {
    *why = "empty node name";
    return false;
  }
  for (const char c : name) {
    if (c == ',' || c == '"' || static_cast<unsigned char>(c) <= 0x20) {
      *why = "node name \"" + Shorten(name) + "\" contains a space, comma, quote or control character";
      return false;
    }
  }
  return true;
}

}  // namespace detail

const char* ToString(NodeState state) { return state == NodeState::kIdle ? "idle" : "busy"; }

const char* ToString(CurveMode mode) {
  switch (mode) {
    case CurveMode::kLearned:
      return "learned";
    case CurveMode::kLearnedCurves:
      return "learned_curves";
    case CurveMode::kLearnedCosts:
      return "learned_costs";
    case CurveMode::kOracle:
      break;
  }
  return "oracle";
}

CurveMode CurveModeFromString(const std::string& name) {
  for (const CurveMode mode :
       {CurveMode::kOracle, CurveMode::kLearned, CurveMode::kLearnedCurves, CurveMode::kLearnedCosts})
    if (name == ToString(mode)) return mode;
  throw InvalidArgument("curves: unknown mode \"" + name +
                        "\" (expected \"oracle\", \"learned\", \"learned_curves\" or \"learned_costs\")");
}

NodeId Trace::FindNode(const std::string& name) const {
  for (std::size_t i = 0; i < node_names.size(); ++i) {
    if (node_names[i] == name) return static_cast<NodeId>(i);
  }
  return -1;
}

bool Trace::IsValid(std::string* error) const {
  std::string why;
  std::unordered_map<std::string, std::size_t> seen;
  seen.reserve(node_names.size());
  for (std::size_t i = 0; i < node_names.size(); ++i) {
    if (!ValidNodeName(node_names[i], &why)) {
      if (error) *error = "node_names[" + std::to_string(i) + "]: " + why;
      return false;
    }
    if (!seen.emplace(node_names[i], i).second) {
      if (error)
        *error = "node_names[" + std::to_string(i) + "]: node \"" + node_names[i] + "\" is listed twice";
      return false;
    }
  }
  std::vector<NodeState> state(node_names.size(), NodeState::kBusy);
  std::vector<std::int64_t> last(node_names.size(), -1);
  for (std::size_t k = 0; k < transitions.size(); ++k) {
    const Transition& t = transitions[k];
    auto fail = [&](const std::string& what) {
      if (error) *error = "transitions[" + std::to_string(k) + "]: " + what;
      return false;
    };
    if (t.time_s < 0) return fail("negative time " + std::to_string(t.time_s));
    if (k > 0 && t.time_s < transitions[k - 1].time_s) return fail("time goes backwards");
    if (t.node < 0 || t.node >= static_cast<NodeId>(node_names.size())) {
      return fail("node id " + std::to_string(t.node) + " out of range");
    }
    const auto n = static_cast<std::size_t>(t.node);
    if (last[n] == t.time_s) return fail("node " + node_names[n] + " changes state twice at the same time");
    if (state[n] == t.state) return fail("node " + node_names[n] + " is already " + ToString(t.state));
    state[n] = t.state;
    last[n] = t.time_s;
  }
  return true;
}

namespace {

// The trace parser over any line source: for_each_line(f) calls f(line, number) for every line.
template <typename ForEachLineFn>
Trace ParseTraceLines(ForEachLineFn&& for_each_line, const std::string& source) {
  Trace trace;
  std::unordered_map<std::string, NodeId> ids;
  std::vector<NodeState> state;
  std::vector<std::int64_t> last_time;
  std::vector<long> last_line;
  std::int64_t prev_time = std::numeric_limits<std::int64_t>::min();
  bool header = false;
  std::string name;
  for_each_line([&](std::string_view line, long number) {
    auto fail = [&](const std::string& what) { throw ParseError(source, number, what); };
    if (!header) {
      if (line != "time,node,state") {
        fail("expected the header \"time,node,state\", found \"" + Shorten(line) + "\"");
      }
      header = true;
      return;
    }
    if (line.empty()) fail("empty line (every line after the header is time,node,state)");
    const std::size_t c1 = line.find(',');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string_view::npos || line.find(',', c2 + 1) != std::string_view::npos) {
      fail("expected 3 comma-separated fields time,node,state, found \"" + Shorten(line) + "\"");
    }
    const std::string_view time_text = line.substr(0, c1);
    const std::string_view node_text = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view state_text = line.substr(c2 + 1);
    std::int64_t time = 0;
    const auto [ptr, ec] = std::from_chars(time_text.data(), time_text.data() + time_text.size(), time);
    if (time_text.empty() || ec != std::errc() || ptr != time_text.data() + time_text.size() || time < 0) {
      fail("time: expected a non-negative whole number of seconds, found \"" + Shorten(time_text) + "\"");
    }
    if (time < prev_time) {
      fail("time " + std::to_string(time) + " is before the previous line's " + std::to_string(prev_time) +
           " (the trace must be sorted by time)");
    }
    NodeState st;
    if (state_text == "idle") {
      st = NodeState::kIdle;
    } else if (state_text == "busy") {
      st = NodeState::kBusy;
    } else {
      fail("state: expected \"idle\" or \"busy\", found \"" + Shorten(state_text) + "\"");
    }
    std::string why;
    if (!ValidNodeName(node_text, &why)) fail("node: " + why);
    name.assign(node_text.data(), node_text.size());
    auto it = ids.find(name);
    NodeId id;
    if (it == ids.end()) {
      id = static_cast<NodeId>(trace.node_names.size());
      ids.emplace(name, id);
      trace.node_names.push_back(name);
      state.push_back(NodeState::kBusy);
      last_time.push_back(-1);
      last_line.push_back(0);
    } else {
      id = it->second;
    }
    const auto n = static_cast<std::size_t>(id);
    if (last_time[n] == time) {
      fail("node " + name + " changes state twice at time " + std::to_string(time) + " (also on line " +
           std::to_string(last_line[n]) + ")");
    }
    if (state[n] == st) {
      fail("node " + name + " is already " + ToString(st) +
           (last_line[n] ? " (since line " + std::to_string(last_line[n]) + ")"
                         : std::string(" (every node is busy before its first line)")));
    }
    state[n] = st;
    last_time[n] = time;
    last_line[n] = number;
    prev_time = time;
    trace.transitions.push_back(Transition{time, id, st});
  });
  if (!header) throw ParseError(source, 1, "empty file: expected the header \"time,node,state\"");
  if (trace.transitions.empty()) throw ParseError(source, 1, "no transitions: the file has only the header");
  return trace;
}

}  // namespace

Trace ParseTrace(const std::string& text, const std::string& source) {
  return ParseTraceLines([&](auto&& f) { text::ForEachTextLine(text, source, f); }, source);
}

Trace ReadTrace(const std::string& path) {
  return ParseTraceLines([&](auto&& f) { text::ForEachFileLine(path, f); }, path);
}

void WriteTrace(const Trace& trace, const std::string& path) {
  std::string error;
  if (!trace.IsValid(&error)) throw InvalidArgument("WriteTrace: " + error);
  std::string out = "time,node,state\n";
  out.reserve(trace.transitions.size() * 20 + 16);
  for (const Transition& t : trace.transitions) {
    out += std::to_string(t.time_s);
    out += ',';
    out += trace.node_names[static_cast<std::size_t>(t.node)];
    out += ',';
    out += ToString(t.state);
    out += '\n';
  }
  text::WriteFileMaybeGzip(path, out);
}

}  // namespace bft::sim
