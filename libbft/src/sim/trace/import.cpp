// Importers of a centre's scheduler logs (Slurm's sacct, the Standard Workload Format) as idle-node
// traces, and the Slurm hostlist expansion they need.
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/text_input.h"

namespace bft::sim {
namespace {

using text::Shorten;

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

// ceil(a / b) for a >= 0, b >= 1, without the overflow of (a + b - 1) / b.
std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t DaysFromCivil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// The machine's nodes: name -> index; names checked and unique.
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

}  // namespace

// The memory a hostlist's names may take, each counted as its characters plus the string itself: a
// million names of up to 31 characters, more than any real hostlist.
constexpr std::uint64_t kMaxHostlistBytes = 64ULL << 20;

std::vector<std::string> ExpandHostlist(const std::string& expression) {
  auto fail = [&](const std::string& what) -> void {
    throw InvalidArgument("hostlist \"" + Shorten(expression) + "\": " + what);
  };
  // Top-level comma-separated items; commas inside brackets separate ranges.
  std::vector<std::string_view> items;
  {
    const std::string_view e(expression);
    int depth = 0;
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= e.size(); ++i) {
      const char c = i < e.size() ? e[i] : ',';
      if (c == '[') {
        if (++depth > 1) fail("nested '['");
      } else if (c == ']') {
        if (--depth < 0) fail("']' without '['");
      } else if (c == ',' && depth == 0) {
        items.push_back(e.substr(begin, i - begin));
        begin = i + 1;
      }
    }
    if (depth != 0) fail("'[' without ']'");
  }
  std::vector<std::string> out;
  std::uint64_t out_bytes = 0;
  for (const std::string_view item : items) {
    if (item.empty()) fail("an empty name (two commas in a row, or a comma at an end)");
    // The item as literals around bracket lists: each name is literals[0] + a suffix of lists[0] +
    // literals[1] + ... The count of names is checked before a list's suffixes are made, their
    // memory before any name is, so a typo cannot exhaust memory; each name is then built once.
    std::vector<std::string_view> literals;
    std::vector<std::vector<std::string>> lists;
    std::uint64_t count = 1;  // names of the item
    std::size_t pos = 0;
    for (;;) {
      const std::size_t open = item.find('[', pos);
      literals.push_back(item.substr(pos, open == std::string_view::npos ? item.npos : open - pos));
      if (open == std::string_view::npos) break;
      const std::size_t close = item.find(']', open);
      struct Range {
        std::int64_t lo, hi;
        std::size_t width;  // zero padding of the first bound
      };
      std::vector<Range> ranges;
      std::uint64_t list_size = 0;
      for (const std::string_view range : Split(item.substr(open + 1, close - open - 1), ',')) {
        const std::size_t dash = range.find('-');
        const std::string_view lo = range.substr(0, dash);
        const std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
        if (!IsDigits(lo) || !IsDigits(hi) || lo.size() > 18 || hi.size() > 18) {
          fail("\"" + std::string(range) + "\" inside brackets is not a number or a range a-b of numbers");
        }
        Range r{0, 0, lo.size()};
        ParseInt64(lo, &r.lo);
        ParseInt64(hi, &r.hi);
        if (r.hi < r.lo) fail("range " + std::string(range) + " runs backwards");
        list_size += static_cast<std::uint64_t>(r.hi - r.lo) + 1;
        if (list_size > kMaxMachineNodes) fail("more than 1,000,000 names");
        ranges.push_back(r);
      }
      if (count * list_size + out.size() > kMaxMachineNodes) fail("more than 1,000,000 names");
      count *= list_size;
      std::vector<std::string>& suffixes = lists.emplace_back();
      suffixes.reserve(list_size);
      for (const Range& r : ranges) {
        for (std::int64_t v = r.lo; v <= r.hi; ++v) {
          std::string digits = std::to_string(v);
          if (digits.size() < r.width) digits.insert(0, r.width - digits.size(), '0');
          suffixes.push_back(std::move(digits));
        }
      }
      pos = close + 1;
    }
    // The memory the names take: every name holds every literal; each suffix of a list is in
    // count / (its list's size) names.
    std::uint64_t bytes = count * sizeof(std::string);
    for (const std::string_view literal : literals) bytes += count * literal.size();
    for (const std::vector<std::string>& suffixes : lists) {
      std::uint64_t suffix_bytes = 0;
      for (const std::string& suffix : suffixes) suffix_bytes += suffix.size();
      bytes += count / suffixes.size() * suffix_bytes;
    }
    if (bytes + out_bytes > kMaxHostlistBytes) fail("its names would take more than 64 MiB");
    out_bytes += bytes;
    // Every combination, the last list turning fastest: r[1-2]n[8-10] gives r1n8 r1n9 r1n10 r2n8 ...
    std::vector<std::size_t> digit(lists.size(), 0);
    for (std::uint64_t k = 0; k < count; ++k) {
      std::string name(literals[0]);
      for (std::size_t i = 0; i < lists.size(); ++i) {
        name += lists[i][digit[i]];
        name += literals[i + 1];
      }
      std::string why;
      if (!detail::ValidNodeName(name, &why)) fail(why);
      out.push_back(std::move(name));
      for (std::size_t i = lists.size(); i-- > 0;) {
        if (++digit[i] < lists[i].size()) break;
        digit[i] = 0;
      }
    }
  }
  return out;
}

std::int64_t ParseSacctTime(const std::string& text) {
  const std::string_view t(text);
  std::int64_t value = 0;
  if (IsDigits(t) && t.size() <= 12 && ParseInt64(t, &value)) return value;
  // YYYY-MM-DDTHH:MM:SS
  auto digits_at = [&](std::size_t pos, std::size_t n, std::int64_t* v) {
    return pos + n <= t.size() && IsDigits(t.substr(pos, n)) && ParseInt64(t.substr(pos, n), v);
  };
  std::int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const bool shape = t.size() == 19 && t[4] == '-' && t[7] == '-' && t[10] == 'T' && t[13] == ':' &&
                     t[16] == ':' && digits_at(0, 4, &y) && digits_at(5, 2, &mo) && digits_at(8, 2, &d) &&
                     digits_at(11, 2, &h) && digits_at(14, 2, &mi) && digits_at(17, 2, &s);
  static constexpr int kDaysInMonth[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (!shape || mo < 1 || mo > 12 || d < 1 || d > kDaysInMonth[mo - 1] || (mo == 2 && d == 29 && !leap) ||
      h > 23 || mi > 59 || s > 59) {
    throw InvalidArgument("time \"" + Shorten(t) +
                          "\": expected Unix seconds or YYYY-MM-DDTHH:MM:SS (sacct's formats)");
  }
  return DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 + mi * 60 +
         s;
}

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

bool SwfImportOptions::IsValid(std::string* error) const {
  const char* problem = procs_per_node < 1  ? "procs_per_node: must be >= 1"
                        : machine_nodes < 0 ? "machine_nodes: must be >= 1 (or 0: from the header)"
                                            : nullptr;
  if (problem != nullptr && error != nullptr) *error = problem;
  return problem == nullptr;
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
