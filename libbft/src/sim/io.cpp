// Readers and writers of the trace (CSV, optionally gzip) and workload (JSONL) formats.
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "bft/profiling.h"
#include "bft/sim.h"
#include "sim/json.h"
#include "sim/text_input.h"

namespace bft::sim {

using detail::Shorten;
using detail::ValidNodeName;

namespace {

// Checks one line of an input file: no NUL byte, valid UTF-8. Throws ParseError naming the line.
void CheckText(std::string_view line, const std::string& source, long number) {
  std::size_t k = 0;
  while (k < line.size()) {
    const auto c = static_cast<unsigned char>(line[k]);
    if (c == 0) {
      throw ParseError(source, number, "NUL byte at column " + std::to_string(k + 1) + " (a binary file?)");
    }
    if (c < 0x80) {
      ++k;
      continue;
    }
    // A multi-byte sequence: a lead byte and 1-3 continuation bytes; no overlong forms, no surrogates.
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07u;
    }
    bool ok = extra > 0 && k + extra < line.size();
    for (std::size_t e = 1; ok && e <= extra; ++e) {
      const auto cc = static_cast<unsigned char>(line[k + e]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (ok && extra == 2) ok = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok && extra == 3) ok = cp >= 0x10000 && cp <= 0x10FFFF;
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw ParseError(source, number,
                       std::string("not UTF-8 text: byte ") + hex + " at column " + std::to_string(k + 1));
    }
    k += extra + 1;
  }
}

// Names a compressed or archive format by its first bytes; empty for anything else.
std::string CompressedFormat(std::string_view head) {
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("BZh")) return "bzip2";
  if (starts(std::string_view("\xFD"
                              "7zXZ\0",
                              6)))
    return "xz";
  if (starts("\x28\xB5\x2F\xFD")) return "zstd";
  if (starts("PK\x03\x04")) return "zip";
  if (starts("\x1F\x9D")) return "compress (.Z)";
  return "";
}

// Hands the lines of a file to f(line, number) as it reads them (a line has no terminator; a
// trailing '\r' and a UTF-8 byte order mark before the first line are removed), so that a file is never held
// whole in memory (a gzip bomb is read line by line, and the parser stops at the first bad one). The file is
// gunzipped when it starts with the gzip magic; concatenated gzip members are read in turn. Errors name the
// file (and the line where there is one): a corrupt gzip stream; one that ends before its trailer (a
// truncated file: inside a line, that line is named); anything but another gzip member after the trailer;
// bzip2, xz, zstd, zip files; NUL bytes and text that is not UTF-8 (CheckText).
// A path with a NUL byte would be cut short by the C library: refuse it.
void CheckPath(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    throw InvalidArgument("path \"" + path.substr(0, path.find('\0')) + "\\0...\": contains a NUL byte");
  }
}

template <typename F>
void StreamLines(const std::string& path, F&& f) {
  CheckPath(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw FileNotFound(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw FileNotFound(path + ": is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw FileNotFound(path + ": cannot be opened");

  std::string pending;  // text not yet handed out: at most one partial line between chunks
  long number = 0;
  auto emit = [&](std::string_view line) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (number == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // a UTF-8 byte order mark
    CheckText(line, path, number);
    f(line, number);
  };
  auto feed = [&](const char* data, std::size_t size) {
    pending.append(data, size);
    std::size_t pos = 0;
    while (true) {
      const std::size_t end = pending.find('\n', pos);
      if (end == std::string::npos) break;
      emit(std::string_view(pending.data() + pos, end - pos));
      pos = end + 1;
    }
    pending.erase(0, pos);
  };

  std::vector<char> in(1 << 17);
  std::size_t have = std::fread(in.data(), 1, in.size(), file.get());
  const std::string format = CompressedFormat(std::string_view(in.data(), have));
  if (!format.empty()) {
    throw InvalidArgument(path + ": a " + format +
                          " file; only plain text and gzip are read (decompress it first)");
  }
  const bool gzip =
      have >= 2 && static_cast<unsigned char>(in[0]) == 0x1F && static_cast<unsigned char>(in[1]) == 0x8B;
  if (!gzip) {
    while (have > 0) {
      feed(in.data(), have);
      have = std::fread(in.data(), 1, in.size(), file.get());
    }
    if (std::ferror(file.get()) != 0) throw Error(path + ": read error");
    if (!pending.empty()) emit(pending);
    return;
  }

  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(path + ": cannot start gzip decompression");
  struct InflateEnd {
    z_stream* zs;
    ~InflateEnd() { inflateEnd(zs); }
  } inflate_end{&zs};
  std::vector<char> out(1 << 18);
  std::uint64_t consumed = 0;  // compressed bytes consumed so far (for messages)
  bool member_done = false;    // the last gzip member ended with a valid trailer
  bool output_full = false;    // the last inflate filled `out`: it may hold more output
  zs.next_in = reinterpret_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(have);
  while (true) {
    if (zs.avail_in == 0 && !output_full) {
      have = std::fread(in.data(), 1, in.size(), file.get());
      if (have == 0) break;
      zs.next_in = reinterpret_cast<Bytef*>(in.data());
      zs.avail_in = static_cast<uInt>(have);
    }
    if (member_done) {
      // Only another gzip member may follow a member's trailer.
      if (zs.avail_in < 2) {  // one byte left in the buffer: move it to the front and read on
        const std::size_t left = zs.avail_in;
        std::memmove(in.data(), zs.next_in, left);
        have = left + std::fread(in.data() + left, 1, in.size() - left, file.get());
        zs.next_in = reinterpret_cast<Bytef*>(in.data());
        zs.avail_in = static_cast<uInt>(have);
      }
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1F || zs.next_in[1] != 0x8B) {
        throw InvalidArgument(path + ": unexpected data after the end of the gzip stream (compressed byte " +
                              std::to_string(consumed) + ", after line " + std::to_string(number) + ")");
      }
      if (inflateReset(&zs) != Z_OK) throw Error(path + ": cannot restart gzip decompression");
      member_done = false;
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    const uInt before = zs.avail_in;
    const int ret = inflate(&zs, Z_NO_FLUSH);
    consumed += before - zs.avail_in;
    if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
      throw InvalidArgument(path +
                            ": cannot be decompressed (gzip: " + (zs.msg != nullptr ? zs.msg : "data error") +
                            ", after line " + std::to_string(number) + ")");
    }
    feed(out.data(), out.size() - zs.avail_out);
    output_full = zs.avail_out == 0;
    if (ret == Z_STREAM_END) member_done = true;
  }
  if (std::ferror(file.get()) != 0) throw Error(path + ": read error");
  if (!member_done) {
    if (!pending.empty()) {
      throw ParseError(path, number + 1,
                       "the gzip stream is truncated inside this line: the file ends before the gzip trailer "
                       "(was it copied while being written?)");
    }
    throw InvalidArgument(path + ": the gzip stream is truncated after line " + std::to_string(number) +
                          ": the file ends before the gzip trailer (was it copied while being written?)");
  }
  if (!pending.empty()) emit(pending);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void WriteFileMaybeGzip(const std::string& path, const std::string& content) {
  CheckPath(path);
  if (EndsWith(path, ".gz")) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (f == nullptr) throw FileNotFound(path + ": cannot be opened for writing");
    std::size_t off = 0;
    while (off < content.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(content.size() - off, 1 << 20));
      if (gzwrite(f, content.data() + off, chunk) != static_cast<int>(chunk)) {
        gzclose(f);
        throw Error(path + ": write failed");
      }
      off += chunk;
    }
    if (gzclose(f) != Z_OK) throw Error(path + ": write failed");
    return;
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) throw FileNotFound(path + ": cannot be opened for writing");
  out << content;
  out.close();  // a full disk shows only when the buffer is flushed
  if (!out) throw Error(path + ": write failed");
}

// Splits text into lines (without the terminator; a trailing '\r' and a leading UTF-8 byte order
// mark are removed), calling f(line, number).
// Checks each line with CheckText (naming `source`).
template <typename F>
void ForEachLine(const std::string& text, const std::string& source, F&& f) {
  std::size_t pos = 0;
  long number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (number == 0 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
    CheckText(line, source, ++number);
    f(line, number);
    pos = end + 1;
  }
}

}  // namespace

namespace detail {

std::string Shorten(std::string_view s) {
  if (s.size() <= 60) return std::string(s);
  std::size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

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

void ForEachFileLine(const std::string& path, const std::function<void(std::string_view, long)>& f) {
  StreamLines(path, f);
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
  return ParseTraceLines([&](auto&& f) { ForEachLine(text, source, f); }, source);
}

Trace ReadTrace(const std::string& path) {
  return ParseTraceLines([&](auto&& f) { StreamLines(path, f); }, path);
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
  WriteFileMaybeGzip(path, out);
}

bool JobSpec::IsValid(std::string* error) const {
  auto fail = [&](const std::string& what) {
    if (error) *error = "job \"" + name + "\": " + what;
    return false;
  };
  if (name.empty()) {
    if (error) *error = "name: empty job name";
    return false;
  }
  if (!std::isfinite(submit_s) || submit_s < 0) return fail("submit must be finite and >= 0");
  if (min_nodes < 1) return fail("min_nodes must be >= 1");
  if (max_nodes < min_nodes) return fail("max_nodes must be >= min_nodes");
  if (!std::isfinite(work) || work <= 0) return fail("work must be finite and > 0");
  if (work > curve::kMaxReportedSamples) {
    return fail("work " + detail::JsonNumber(work) + " exceeds " +
                detail::JsonNumber(curve::kMaxReportedSamples) +
                " samples (the progress reports of a learned-curves replay could not carry it)");
  }
  if (!std::isfinite(scale_up_s) || scale_up_s < 0) return fail("scale_up_s must be finite and >= 0");
  if (!std::isfinite(scale_down_s) || scale_down_s < 0) return fail("scale_down_s must be finite and >= 0");
  if (!std::isfinite(weight) || weight <= 0) return fail("weight must be finite and > 0");
  if (throughput.empty()) return fail("throughput: no breakpoints");
  if (objective.empty()) return fail("objective: no breakpoints");
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
  if (!check_curve("throughput", throughput) || !check_curve("objective", objective)) return false;
  std::unordered_set<std::string> names;
  for (std::size_t k = 0; k < configurations.size(); ++k) {
    const alloc::Configuration& c = configurations[k];
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

const std::vector<JobField>& ConfigurationFields() {
  static const std::vector<JobField> fields = {
      {"name", true, true},       {"efficiency", true, true}, {"nodes", false, true},
      {"throughput", true, true}, {"objective", false, true},
  };
  return fields;
}

const std::vector<JobField>& JobFields() {
  // The order is the order of the slots in ParseJobLines.
  static const std::vector<JobField> fields = {
      {"name", true, true},         {"submit", true, false}, {"min_nodes", true, true},
      {"max_nodes", true, true},    {"work", true, false},   {"scale_up_s", true, true},
      {"scale_down_s", true, true}, {"nodes", true, true},   {"throughput", true, true},
      {"objective", false, true},   {"weight", false, true}, {"configurations", false, true},
  };
  return fields;
}

namespace {

template <typename ForEachLineFn>
std::vector<JobSpec> ParseJobLines(ForEachLineFn&& for_each_line, const std::string& source) {
  std::vector<JobSpec> jobs;
  std::unordered_map<std::string, long> first_line;
  for_each_line([&](std::string_view line, long line_number) {
    auto fail = [&](const std::string& what) { throw ParseError(source, line_number, what); };
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;  // blank line: no job
    std::vector<detail::JsonField> fields;
    try {
      fields = detail::ParseJobJsonObject(line);
    } catch (const detail::JsonError& e) {
      fail(std::string("malformed JSON: ") + e.what());
    }
    // Slots in the order of a field table (JobFields(), ConfigurationFields()).
    auto slots = [&](const std::vector<detail::JsonField>& object, const std::vector<JobField>& table,
                     const std::string& where) {
      std::vector<const detail::JsonField*> found(table.size(), nullptr);
      for (const detail::JsonField& f : object) {
        const auto it =
            std::find_if(table.begin(), table.end(), [&](const JobField& e) { return f.key == e.name; });
        if (it == table.end()) {
          std::string known;
          for (const JobField& e : table) known += (known.empty() ? "" : ", ") + std::string(e.name);
          fail(where + "unknown field \"" + Shorten(f.key) + "\" (known: " + known + ")");
        }
        found[static_cast<std::size_t>(it - table.begin())] = &f;
      }
      return found;
    };
    const std::vector<const detail::JsonField*> found = slots(fields, JobFields(), "");
    const detail::JsonField* const name = found[0];
    const detail::JsonField* const submit = found[1];
    const detail::JsonField* const min_nodes = found[2];
    const detail::JsonField* const max_nodes = found[3];
    const detail::JsonField* const work = found[4];
    const detail::JsonField* const scale_up = found[5];
    const detail::JsonField* const scale_down = found[6];
    const detail::JsonField* const nodes = found[7];
    const detail::JsonField* const throughput = found[8];
    const detail::JsonField* const objective = found[9];
    const detail::JsonField* const weight = found[10];
    const detail::JsonField* const configurations = found[11];
    // `where` prefixes every message about a field: the job, and the configuration for one of its.
    std::string where;
    auto require = [&](const detail::JsonField* f, const char* key) {
      if (f == nullptr) fail(where + "missing field \"" + key + "\"");
    };
    require(name, "name");
    if (name->value.kind != detail::JsonValue::Kind::kString) fail("\"name\": expected a string");
    const std::string job = "job \"" + Shorten(name->value.text) + "\": ";
    where = job;
    auto number = [&](const detail::JsonField* f, const char* key) {
      require(f, key);
      if (f->value.kind != detail::JsonValue::Kind::kNumber)
        fail(where + "\"" + key + "\": expected a number");
      return f->value.number;
    };
    auto integer = [&](double x, const std::string& what) {
      if (x != std::floor(x) || std::fabs(x) > 1e9)
        fail(where + what + ": expected a whole number, found " + detail::JsonNumber(x));
      return static_cast<int>(x);
    };
    auto array = [&](const detail::JsonField* f, const char* key) -> const std::vector<double>& {
      require(f, key);
      if (f->value.kind != detail::JsonValue::Kind::kNumberArray)
        fail(where + "\"" + key + "\": expected an array of numbers");
      return f->value.array;
    };
    auto node_counts = [&](const detail::JsonField* f) {
      const std::vector<double>& values = array(f, "nodes");
      std::vector<int> counts;
      counts.reserve(values.size());
      for (std::size_t k = 0; k < values.size(); ++k) {
        counts.push_back(integer(values[k], "\"nodes\"[" + std::to_string(k) + "]"));
      }
      return counts;
    };
    auto make_curve = [&](const std::vector<int>& counts, const detail::JsonField* f, const char* key) {
      const std::vector<double>& values = array(f, key);
      if (values.size() != counts.size()) {
        fail(where + "\"" + key + "\" has " + std::to_string(values.size()) + " values but \"nodes\" has " +
             std::to_string(counts.size()));
      }
      std::string why;
      if (!curve::ThroughputCurve::Check(counts, values, &why)) fail(where + "\"" + key + "\": " + why);
      return curve::ThroughputCurve(counts, values);
    };
    JobSpec spec;
    spec.name = name->value.text;
    if (spec.name.empty()) fail("\"name\": empty job name");
    spec.submit_s = number(submit, "submit");
    spec.min_nodes = integer(number(min_nodes, "min_nodes"), "\"min_nodes\"");
    spec.max_nodes = integer(number(max_nodes, "max_nodes"), "\"max_nodes\"");
    spec.work = number(work, "work");
    spec.scale_up_s = number(scale_up, "scale_up_s");
    spec.scale_down_s = number(scale_down, "scale_down_s");
    if (weight != nullptr) spec.weight = number(weight, "weight");
    const std::vector<int> counts = node_counts(nodes);
    spec.throughput = make_curve(counts, throughput, "throughput");
    spec.objective = objective != nullptr ? make_curve(counts, objective, "objective") : spec.throughput;
    if (configurations != nullptr) {
      // An empty array ([]) reads as numbers: no configurations.
      const detail::JsonValue& value = configurations->value;
      if (value.kind != detail::JsonValue::Kind::kObjectArray &&
          !(value.kind == detail::JsonValue::Kind::kNumberArray && value.array.empty())) {
        fail(job + "\"configurations\": expected an array of objects");
      }
      for (std::size_t k = 0; k < value.objects.size(); ++k) {
        where = job + "\"configurations\"[" + std::to_string(k) + "]: ";
        const std::vector<const detail::JsonField*> c = slots(value.objects[k], ConfigurationFields(), where);
        alloc::Configuration configuration;
        require(c[0], "name");
        if (c[0]->value.kind != detail::JsonValue::Kind::kString) fail(where + "\"name\": expected a string");
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
    if (!spec.IsValid(&why)) fail(why);
    const auto [it, inserted] = first_line.emplace(spec.name, line_number);
    if (!inserted) fail(job + "duplicate job name (first on line " + std::to_string(it->second) + ")");
    jobs.push_back(std::move(spec));
  });
  if (jobs.empty()) throw ParseError(source, 1, "no jobs: the workload is empty (one JSON object per line)");
  return jobs;
}

}  // namespace

std::vector<JobSpec> ParseJobs(const std::string& text, const std::string& source) {
  return ParseJobLines([&](auto&& f) { ForEachLine(text, source, f); }, source);
}

std::vector<JobSpec> ReadJobs(const std::string& path) {
  return ParseJobLines([&](auto&& f) { StreamLines(path, f); }, path);
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
    if (!j.configurations.empty()) {
      out += ", \"configurations\": [";
      for (std::size_t k = 0; k < j.configurations.size(); ++k) {
        const alloc::Configuration& c = j.configurations[k];
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
  WriteFileMaybeGzip(path, out);
}

}  // namespace bft::sim
