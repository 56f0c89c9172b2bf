// Readers and writers of the trace (CSV, gzip) and workload (JSONL) formats.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../shared_data.h"
#include "bft/sim.h"

namespace bft::sim {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("bft_sim_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The message of the ParseError `text` raises, or "" if it parses.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

const char* kJob =
    R"({"name": "a", "submit": 5, "min_nodes": 1, "max_nodes": 4, "work": 1000.0, "scale_up_s": 2.5, )"
    R"("scale_down_s": 1.5, "nodes": [0, 1, 2, 4], "throughput": [0.0, 10.0, 18.0, 30.0], )"
    R"("objective": [0, 1, 2, 3]})";

TEST(SimTraceReader, MapsNodeNamesToIdsInOrderOfFirstAppearance) {
  const Trace t = ParseTrace("time,node,state\n3,b7,idle\n3,a1,idle\n9,b7,busy\n12,a1,busy\n");
  ASSERT_EQ(t.node_names, (std::vector<std::string>{"b7", "a1"}));
  ASSERT_EQ(t.transitions.size(), 4u);
  EXPECT_EQ(t.transitions[1].node, 1);
  EXPECT_EQ(t.transitions[1].time_s, 3);
  EXPECT_EQ(t.transitions[2].state, NodeState::kBusy);
  EXPECT_EQ(t.FindNode("a1"), 1);
  EXPECT_EQ(t.FindNode("zz"), -1);
  EXPECT_EQ(t.last_time_s(), 12);
  std::string error;
  EXPECT_TRUE(t.IsValid(&error)) << error;
}

TEST(SimTraceReader, AcceptsCrlfLineEndings) {
  const Trace t = ParseTrace("time,node,state\r\n1,x,idle\r\n");
  EXPECT_EQ(t.transitions.size(), 1u);
}

TEST(SimTraceReader, ReportsFileAndLineOfEveryKindOfBadRow) {
  auto err = [](const std::string& text) { return ErrorOf([&] { ParseTrace(text, "t.csv"); }); };
  EXPECT_EQ(err("time,node\n1,a,idle\n"),
            "t.csv:1: expected the header \"time,node,state\", found \"time,node\"");
  EXPECT_EQ(err(""), "t.csv:1: empty file: expected the header \"time,node,state\"");
  EXPECT_EQ(err("time,node,state\n1,a,idle\nx,a,busy\n"),
            "t.csv:3: time: expected a non-negative whole number of seconds, found \"x\"");
  EXPECT_EQ(err("time,node,state\n1.5,a,idle\n"),
            "t.csv:2: time: expected a non-negative whole number of seconds, found \"1.5\"");
  EXPECT_EQ(err("time,node,state\n-1,a,idle\n"),
            "t.csv:2: time: expected a non-negative whole number of seconds, found \"-1\"");
  EXPECT_EQ(err("time,node,state\n1,a,free\n"),
            "t.csv:2: state: expected \"idle\" or \"busy\", found \"free\"");
  EXPECT_EQ(err("time,node,state\n1,a\n"),
            "t.csv:2: expected 3 comma-separated fields time,node,state, found \"1,a\"");
  EXPECT_EQ(err("time,node,state\n1,a,idle,x\n"),
            "t.csv:2: expected 3 comma-separated fields time,node,state, found \"1,a,idle,x\"");
  EXPECT_EQ(err("time,node,state\n1,,idle\n"), "t.csv:2: node: empty node name");
  EXPECT_EQ(err("time,node,state\n5,a,idle\n4,b,idle\n"),
            "t.csv:3: time 4 is before the previous line's 5 (the trace must be sorted by time)");
  EXPECT_EQ(err("time,node,state\n1,a,busy\n"),
            "t.csv:2: node a is already busy (every node is busy before its first line)");
  EXPECT_EQ(err("time,node,state\n1,a,idle\n2,b,idle\n3,a,idle\n"),
            "t.csv:4: node a is already idle (since line 2)");
  EXPECT_EQ(err("time,node,state\n1,a,idle\n1,a,busy\n"),
            "t.csv:3: node a changes state twice at time 1 (also on line 2)");
  EXPECT_EQ(err("time,node,state\n1,a,idle\n\n2,a,busy\n"),
            "t.csv:3: empty line (every line after the header is time,node,state)");
}

TEST(SimTraceReader, ParseErrorCarriesPathAndLine) {
  try {
    ParseTrace("time,node,state\n1,a,idle\n2,a,what\n", "f.csv");
    FAIL() << "no exception";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.path(), "f.csv");
    EXPECT_EQ(e.line(), 3);
  }
}

TEST(SimTraceReader, MissingFileIsFileNotFound) {
  EXPECT_THROW(ReadTrace(TempPath("does-not-exist.csv")), FileNotFound);
  EXPECT_THROW(ReadJobs(TempPath("does-not-exist.jsonl")), FileNotFound);
}

TEST(SimTraceReader, PlainAndGzipFilesRoundTrip) {
  const Trace t = ParseTrace("time,node,state\n0,n1,idle\n0,n2,idle\n7,n1,busy\n9,n3,idle\n9,n2,busy\n");
  for (const std::string name : {"rt.csv", "rt.csv.gz"}) {
    const std::string path = TempPath(name);
    WriteTrace(t, path);
    const Trace back = ReadTrace(path);
    EXPECT_EQ(back.node_names, t.node_names) << name;
    ASSERT_EQ(back.transitions.size(), t.transitions.size()) << name;
    for (std::size_t k = 0; k < t.transitions.size(); ++k) {
      EXPECT_EQ(back.transitions[k].time_s, t.transitions[k].time_s);
      EXPECT_EQ(back.transitions[k].node, t.transitions[k].node);
      EXPECT_EQ(back.transitions[k].state, t.transitions[k].state);
    }
    std::filesystem::remove(path);
  }
  // The gzip file really is compressed (magic bytes 1f 8b).
  const std::string gz = TempPath("magic.csv.gz");
  WriteTrace(t, gz);
  std::ifstream in(gz, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  std::filesystem::remove(gz);
}

TEST(SimTraceReader, ErrorsInAFileNameThePath) {
  const std::string path = TempPath("bad.csv");
  {
    std::ofstream out(path);
    out << "time,node,state\n1,a,idle\n2,a,idle\n";
  }
  EXPECT_EQ(ErrorOf([&] { ReadTrace(path); }), path + ":3: node a is already idle (since line 2)");
  std::filesystem::remove(path);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// The message of any bft::Error `f` raises, or "" if it does not throw.
template <typename F>
std::string AnyErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A gzip trace of `rows` transitions (two lines per node: idle, then busy).
std::string GzipTrace(const std::string& name, int rows) {
  Trace t;
  for (int k = 0; k < rows / 2; ++k) {
    t.node_names.push_back("n" + std::to_string(k));
    t.transitions.push_back({k, k, NodeState::kIdle});
  }
  for (int k = 0; k < rows / 2; ++k) t.transitions.push_back({rows + k, k, NodeState::kBusy});
  const std::string path = TempPath(name);
  WriteTrace(t, path);
  return path;
}

TEST(SimTraceReader, ATruncatedGzipTraceIsAnErrorNamingTheFileOrTheLine) {
  const std::string path = GzipTrace("trunc.csv.gz", 4000);
  ASSERT_EQ(ReadTrace(path).transitions.size(), 4000u);
  const std::string whole = Slurp(path);
  // Cut in the middle of the compressed data (a file copied while being written): the last
  // decompressed line is incomplete, and it is the one named.
  Spit(path, whole.substr(0, whole.size() / 2));
  const std::string half = AnyErrorOf([&] { ReadTrace(path); });
  EXPECT_NE(half.find(path + ":"), std::string::npos) << half;
  EXPECT_NE(half.find("gzip stream is truncated"), std::string::npos) << half;
  // Only the 8-byte trailer missing: every line is complete, the file is named.
  Spit(path, whole.substr(0, whole.size() - 8));
  const std::string trailer = AnyErrorOf([&] { ReadTrace(path); });
  EXPECT_NE(trailer.find(path + ": the gzip stream is truncated after line 4001"), std::string::npos)
      << trailer;
  std::filesystem::remove(path);
}

TEST(SimTraceReader, DataAfterTheGzipStreamIsAnErrorButAnotherMemberIsRead) {
  const std::string path = GzipTrace("garbage.csv.gz", 10);
  const std::string whole = Slurp(path);
  Spit(path, whole + "garbage");
  EXPECT_NE(
      AnyErrorOf([&] { ReadTrace(path); }).find(path + ": unexpected data after the end of the gzip stream"),
      std::string::npos);
  // Two gzip members (as `cat a.gz b.gz` makes) are one stream: the second member's header line
  // is then an ordinary (bad) row, reported with its line number.
  Spit(path, whole + whole);
  EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }),
            path + ":12: time: expected a non-negative whole number of seconds, found \"time\"");
  std::filesystem::remove(path);
}

TEST(SimTraceReader, ALineLongerThanTheLimitIsRefusedNamingIt) {
  const std::string path = TempPath("long.csv");
  // The limit itself is fine (a bad row, but read whole); one byte more is refused, newline or not.
  const std::string at_limit(std::size_t{1} << 20, 'x');  // 1 MiB: docs/formats.md
  Spit(path, "time,node,state\n" + at_limit + "\n");
  EXPECT_NE(AnyErrorOf([&] { ReadTrace(path); }).find(path + ":2: "), std::string::npos);
  EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }).find("limit"), std::string::npos);
  for (const std::string tail : {"x\n1,a,idle\n", "x"}) {
    Spit(path, "time,node,state\n" + at_limit + tail);
    EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }),
              path + ":2: a line longer than 1048576 bytes, the formats' limit (is this the right file?)");
  }
  std::filesystem::remove(path);
}

TEST(SimTraceReader, CompressedFormatsOtherThanGzipAndBinaryOrNonUtf8TextAreRefused) {
  const std::string path = TempPath("odd.csv");
  Spit(path, std::string("BZh91AY&SY\x01\x02\x03", 13));
  EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }),
            path + ": a bzip2 file; only plain text and gzip are read (decompress it first)");
  Spit(path, std::string("\xFD"
                         "7zXZ\0\0\x04",
                         8));
  EXPECT_NE(AnyErrorOf([&] { ReadTrace(path); }).find("a xz file"), std::string::npos);
  Spit(path, std::string("time,node,state\n1,a\0b,idle\n", 27));
  EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }), path + ":2: NUL byte at column 4 (a binary file?)");
  Spit(path, "time,node,state\n1,caf\xE9,idle\n");  // Latin-1, not UTF-8
  EXPECT_EQ(AnyErrorOf([&] { ReadTrace(path); }), path + ":2: not UTF-8 text: byte 0xE9 at column 6");
  Spit(path, "time,node,state\n1,caf\xC3\xA9,idle\n");  // the same name in UTF-8 is fine
  EXPECT_EQ(ReadTrace(path).node_names, std::vector<std::string>{"caf\xC3\xA9"});
  EXPECT_NE(AnyErrorOf([&] { ReadTrace(std::string("odd\0.csv", 8)); }).find("contains a NUL byte"),
            std::string::npos);
  std::filesystem::remove(path);
}

TEST(SimTraceReader, AHeaderOnlyTraceAndAnEmptyWorkloadAreErrors) {
  EXPECT_EQ(ErrorOf([] { ParseTrace("time,node,state\n", "t.csv"); }),
            "t.csv:1: no transitions: the file has only the header");
  EXPECT_EQ(ErrorOf([] { ParseJobs("\n  \n", "j.jsonl"); }),
            "j.jsonl:1: no jobs: the workload is empty (one JSON object per line)");
}

TEST(SimTraceValidity, RejectsInMemoryTracesThatBreakTheRules) {
  Trace t;
  t.node_names = {"a", "b"};
  t.transitions = {{0, 0, NodeState::kIdle}, {5, 0, NodeState::kBusy}};
  std::string error;
  EXPECT_TRUE(t.IsValid(&error)) << error;
  t.transitions.push_back({4, 1, NodeState::kIdle});
  EXPECT_FALSE(t.IsValid(&error));
  EXPECT_EQ(error, "transitions[2]: time goes backwards");
  t.transitions.back() = {6, 2, NodeState::kIdle};
  EXPECT_FALSE(t.IsValid(&error));
  EXPECT_EQ(error, "transitions[2]: node id 2 out of range");
  t.transitions.back() = {6, 1, NodeState::kBusy};
  EXPECT_FALSE(t.IsValid(&error));
  EXPECT_EQ(error, "transitions[2]: node b is already busy");
  t.transitions.pop_back();
  t.node_names = {"a", "a"};
  EXPECT_FALSE(t.IsValid(&error));
  EXPECT_EQ(error, "node_names[1]: node \"a\" is listed twice");
}

TEST(SimJobsReader, ReadsEveryField) {
  const std::vector<JobSpec> jobs = ParseJobs(std::string(kJob) + "\n");
  ASSERT_EQ(jobs.size(), 1u);
  const JobSpec& j = jobs[0];
  EXPECT_EQ(j.name, "a");
  EXPECT_EQ(j.submit_s, 5.0);
  EXPECT_EQ(j.min_nodes, 1);
  EXPECT_EQ(j.max_nodes, 4);
  EXPECT_EQ(j.work, 1000.0);
  EXPECT_EQ(j.scale_up_s, 2.5);
  EXPECT_EQ(j.scale_down_s, 1.5);
  EXPECT_EQ(j.throughput.nodes(), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(j.throughput.values(), (std::vector<double>{0, 10, 18, 30}));
  EXPECT_EQ(j.objective.values(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(j.weight, 1.0);
}

TEST(SimJobsReader, ObjectiveDefaultsToThroughputAndBlankLinesAreNotJobs) {
  const std::string line =
      R"({"name":"b","submit":0,"min_nodes":2,"max_nodes":2,"work":1e3,"scale_up_s":0,"scale_down_s":0,)"
      R"("nodes":[0,2],"throughput":[0,5.5],"weight":2})";
  const std::vector<JobSpec> jobs = ParseJobs("\n" + line + "\n   \n");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].objective.values(), jobs[0].throughput.values());
  EXPECT_EQ(jobs[0].weight, 2.0);
}

TEST(SimJobsReader, ReportsFileLineAndFieldOfBadJobs) {
  auto err = [](const std::string& line) {
    return ErrorOf([&] { ParseJobs(std::string(kJob) + "\n" + line, "j.jsonl"); });
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kJob;
    const std::size_t at = s.find(from);
    return s.replace(at, from.size(), to);
  };
  EXPECT_EQ(err("{\"name\": \"x\""),
            "j.jsonl:2: malformed JSON: column 13: expected ',' or '}' after the value of \"name\"");
  EXPECT_EQ(err("not json"), "j.jsonl:2: malformed JSON: column 1: expected '{' at the start of the object");
  EXPECT_EQ(err(with("\"name\": \"a\"", "\"name\": \"b\", \"color\": \"red\"")).substr(0, 36),
            "j.jsonl:2: unknown field \"color\" (kn");
  EXPECT_EQ(err(with("\"work\": 1000.0, ", "")), "j.jsonl:2: job \"a\": missing field \"work\"");
  EXPECT_EQ(err(with("\"min_nodes\": 1", "\"min_nodes\": \"1\"")),
            "j.jsonl:2: job \"a\": \"min_nodes\": expected a number, found \"1\"");
  EXPECT_EQ(err(with("\"min_nodes\": 1", "\"min_nodes\": 1.5")),
            "j.jsonl:2: job \"a\": \"min_nodes\": expected a whole number, found 1.5");
  EXPECT_EQ(err(with("[0, 1, 2, 4]", "[0, 1, 2.5, 4]")),
            "j.jsonl:2: job \"a\": \"nodes\"[2]: expected a whole number, found 2.5");
  EXPECT_EQ(err(with("[0.0, 10.0, 18.0, 30.0]", "[0.0, 10.0, 18.0]")),
            "j.jsonl:2: job \"a\": \"throughput\" has 3 values but \"nodes\" has 4");
  EXPECT_EQ(
      err(with("\"submit\": 5", "\"submit\": true")),
      "j.jsonl:2: malformed JSON: column 25: \"submit\": true, false and null are not supported (expected a "
      "string, number or array of numbers)");
  EXPECT_EQ(
      err(with("\"submit\": 5", "\"submit\": {\"t\": 1}")),
      "j.jsonl:2: malformed JSON: column 25: \"submit\": an object is not supported as a value (only in an "
      "array of objects)");
  EXPECT_EQ(err(with("\"submit\": 5", "\"submit\": 5, \"submit\": 6")),
            "j.jsonl:2: malformed JSON: column 28: duplicate field \"submit\"");
  EXPECT_EQ(err(with("\"submit\": 5", "\"submit\": 05")),
            "j.jsonl:2: malformed JSON: column 26: \"submit\": leading zeros are not allowed in numbers");
  EXPECT_EQ(err(std::string(kJob) + " x"), "j.jsonl:2: malformed JSON: column " +
                                               std::to_string(std::string(kJob).size() + 2) +
                                               ": unexpected text after the end of the object");
  EXPECT_EQ(err(kJob), "j.jsonl:2: job \"a\": duplicate job name (first on line 1)");
  EXPECT_EQ(err(with("\"max_nodes\": 4", "\"max_nodes\": 0")),
            "j.jsonl:2: job \"a\": max_nodes must be >= min_nodes");
  EXPECT_EQ(err(with("\"work\": 1000.0", "\"work\": -1")),
            "j.jsonl:2: job \"a\": work must be finite and > 0");
  EXPECT_EQ(err(with("\"work\": 1000.0", "\"work\": 1e999")),
            "j.jsonl:2: malformed JSON: column " + std::to_string(std::string(kJob).find("\"work\"") + 9) +
                ": \"work\": number out of range");
  // A curve whose node counts do not increase names the breakpoint (the message is the curve's).
  const std::string curve_error = err(with("[0, 1, 2, 4]", "[0, 2, 1, 4]"));
  EXPECT_EQ(curve_error.rfind("j.jsonl:2: job \"a\": \"throughput\": ", 0), 0u) << curve_error;
}

TEST(SimJobsReader, StringEscapesAreDecoded) {
  std::string line = kJob;
  line.replace(line.find("\"a\""), 3, R"("a\"b\u00e9\ud83d\ude00")");
  const std::vector<JobSpec> jobs = ParseJobs(line);
  EXPECT_EQ(jobs[0].name, "a\"b\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(SimJobsReader, WriteThenReadGivesTheSameJobs) {
  std::vector<JobSpec> jobs = ParseJobs(kJob);
  jobs[0].name = "needs \"escaping\"";
  jobs[0].submit_s = 0.1;  // not exactly representable: must round-trip anyway
  jobs[0].weight = 3.0;
  const std::string path = TempPath("jobs.jsonl");
  WriteJobs(jobs, path);
  const std::vector<JobSpec> back = ReadJobs(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].name, jobs[0].name);
  EXPECT_EQ(back[0].submit_s, 0.1);
  EXPECT_EQ(back[0].weight, 3.0);
  EXPECT_EQ(back[0].throughput.values(), jobs[0].throughput.values());
  EXPECT_EQ(back[0].objective.values(), jobs[0].objective.values());
  std::filesystem::remove(path);
}

TEST(SimRealData, ReadsTheSummitTraceAndTheImagenetWorkload) {
  const std::string trace_path = testing::SharedDataPath("summit-idle-nodes-2021-02.csv.gz");
  const std::string jobs_path = testing::SharedDataPath("jobs-imagenet-throughput-1001.jsonl");
  BFT_REQUIRE_SHARED_DATA(trace_path);
  BFT_REQUIRE_SHARED_DATA(jobs_path);
  const Trace t = ReadTrace(trace_path);
  EXPECT_EQ(t.transitions.size(), 846856u);
  EXPECT_EQ(t.node_names.size(), 4680u);  // nodes that are idle at least once (of Summit's 4,734)
  EXPECT_EQ(t.last_time_s(), 1289437);
  const std::vector<JobSpec> jobs = ReadJobs(jobs_path);
  ASSERT_EQ(jobs.size(), 1001u);
  EXPECT_EQ(jobs[0].name, "J00000-AlexNet");
  EXPECT_EQ(jobs[0].submit_s, 72743.0);
  EXPECT_EQ(jobs[0].max_nodes, 64);
  EXPECT_EQ(jobs[0].work, 1.3e8);
  EXPECT_DOUBLE_EQ(jobs[0].throughput.Evaluate(64), 202135.4);
}

// Hand-computed: a idle [10, 40), b idle [20, 30) and again from 35 to beyond the end, c idle [40, 60).
TEST(SimTraceStats, HandComputedTrace) {
  const Trace t = ParseTrace(
      "time,node,state\n10,a,idle\n20,b,idle\n30,b,busy\n35,b,idle\n40,a,busy\n40,c,idle\n60,c,busy\n");
  const TraceStats s = ComputeTraceStats(t);
  EXPECT_EQ(s.nodes, 3);
  EXPECT_EQ(s.transitions, 7);
  EXPECT_EQ(s.start_s, 10);
  EXPECT_EQ(s.end_s, 60);
  // Idle counts: [10,20) 1, [20,30) 2, [30,35) 1, [35,40) 2, [40,60) 2 (b and c): 10+20+5+10+40 = 85.
  EXPECT_DOUBLE_EQ(s.idle_node_s, 85.0);
  EXPECT_DOUBLE_EQ(s.mean_idle_nodes, 85.0 / 50.0);
  // 15 s of the 50 with 1 idle node (30 %), 35 s with 2.
  EXPECT_EQ(s.p50_idle_nodes, 2);
  EXPECT_EQ(s.p90_idle_nodes, 2);
  EXPECT_EQ(s.max_idle_nodes, 2);
  EXPECT_EQ(s.hole_lengths_s, (std::vector<double>{10.0, 20.0, 30.0}));
  EXPECT_EQ(s.holes_open_at_end, 1);  // b, idle since 35
  EXPECT_EQ(s.step_time_s, (std::vector<std::int64_t>{10, 20, 30, 35, 40, 60}));
  EXPECT_EQ(s.step_idle_nodes, (std::vector<std::int64_t>{1, 2, 1, 2, 2, 1}));
  EXPECT_DOUBLE_EQ(s.events_per_hour, 6 * 3600.0 / 50.0);
}

TEST(SimTraceStats, EmptyAndSingleInstantTracesHaveNoRates) {
  const TraceStats empty = ComputeTraceStats(ParseTrace("time,node,state\n5,a,idle\n"));
  EXPECT_EQ(empty.mean_idle_nodes, 0.0);
  EXPECT_EQ(empty.events_per_hour, 0.0);
  EXPECT_EQ(empty.holes_open_at_end, 1);
  EXPECT_TRUE(empty.hole_lengths_s.empty());
}

TEST(SimTraceStats, InvalidTraceIsRefusedNamingTheTransition) {
  Trace t;
  t.node_names = {"a"};
  t.transitions = {{5, 0, NodeState::kBusy}};  // busy before ever idle
  EXPECT_THROW(ComputeTraceStats(t), InvalidArgument);
}

}  // namespace
}  // namespace bft::sim
