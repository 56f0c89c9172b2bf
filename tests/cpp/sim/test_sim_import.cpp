// Importers of scheduler logs (sacct, SWF) and the hostlist expansion, against hand-computed traces
// of the project's fixtures (tests/fixtures).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bft/sim.h"

namespace bft::sim {
namespace {

std::string Fixture(const std::string& name) { return std::string(BFT_TEST_FIXTURES_DIR) + "/" + name; }

// A file in the temporary directory with this content, removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& content)
      : path_((std::filesystem::temp_directory_path() /
               ("bft_import_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                  .string()) {
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// The trace as "time,node,state" lines, for comparing with hand-computed ones.
std::vector<std::string> Lines(const Trace& trace) {
  std::vector<std::string> out;
  for (const Transition& t : trace.transitions) {
    out.push_back(std::to_string(t.time_s) + "," + trace.node_names[static_cast<std::size_t>(t.node)] + "," +
                  ToString(t.state));
  }
  return out;
}

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(SimHostlist, ExpandsRangesListsPaddingAndProducts) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ExpandHostlist("c[01-03,07],gpu5"), (V{"c01", "c02", "c03", "c07", "gpu5"}));
  EXPECT_EQ(ExpandHostlist("r[1-2]n[8-10]"), (V{"r1n8", "r1n9", "r1n10", "r2n8", "r2n9", "r2n10"}));
  EXPECT_EQ(ExpandHostlist("nid[0098-0101]"), (V{"nid0098", "nid0099", "nid0100", "nid0101"}));
  EXPECT_EQ(ExpandHostlist("login1"), (V{"login1"}));
  EXPECT_EQ(ExpandHostlist("x[5]-ib"), (V{"x5-ib"}));
}

TEST(SimHostlist, BadExpressionsAreErrorsNamingThem) {
  EXPECT_NE(ErrorOf([] { ExpandHostlist("c[3-1]"); }).find("range 3-1 runs backwards"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("c[01-"); }).find("'[' without ']'"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("c]1"); }).find("']' without '['"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("c[a-b]"); }).find("not a number"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("a,,b"); }).find("empty name"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist(""); }).find("empty name"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("c[0-99999999999]"); }).find("more than 1,000,000"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("a[0-999]b[0-9999]"); }).find("more than 1,000,000"),
            std::string::npos);
  // Found by the fuzzer: few enough names, but each long (a long prefix, or a long literal after
  // the range) would take gigabytes; refused before anything is allocated.
  EXPECT_NE(ErrorOf([] { ExpandHostlist(std::string(300, 'p') + "[0-999999]"); }).find("more than 64 MiB"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("a[0-999999]" + std::string(300, 's')); }).find("more than 64 MiB"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf([] { ExpandHostlist("a[0-99]b[0-9999]" + std::string(100, 's')); }).find("more than 64 MiB"),
      std::string::npos);
  EXPECT_EQ(ExpandHostlist(std::string(25, 'x') + "[000000-999999]").size(), 1'000'000U);
  EXPECT_NE(ErrorOf([] { ExpandHostlist("a b"); }).find("contains a space"), std::string::npos);
}

TEST(SimSacctTime, ReadsUnixSecondsAndIsoTimesAsUtc) {
  EXPECT_EQ(ParseSacctTime("1764547200"), 1764547200);
  EXPECT_EQ(ParseSacctTime("1970-01-01T00:00:00"), 0);
  EXPECT_EQ(ParseSacctTime("2026-11-01T01:30:05"), 1793496605);
  EXPECT_EQ(ParseSacctTime("2024-02-29T00:00:00") - ParseSacctTime("2024-02-28T00:00:00"), 86400);
  for (const char* bad : {"2023-02-29T00:00:00", "2026-13-01T00:00:00", "2026-11-01 01:30:05", "Unknown",
                          "-5", "2026-11-01T24:00:00", ""}) {
    EXPECT_NE(ErrorOf([&] { ParseSacctTime(bad); }).find("expected Unix seconds or YYYY-MM-DDTHH:MM:SS"),
              std::string::npos)
        << bad;
  }
}

TEST(SimImportSacct, FixtureGivesTheHandComputedTrace) {
  SacctImportOptions options;
  options.machine_nodes = ExpandHostlist("c[01-04]");
  const ImportedTrace imported = ImportSacct(Fixture("sacct_small.txt"), options);
  // 100 holds c01-c02 from the start to 3600; 101 holds c03 1800-7200; 102 holds c02-c03 from 3600
  // on (still running); 104 holds c04 5400-6300 (its gpu1 is not a machine node). c02 is never idle.
  EXPECT_EQ(Lines(imported.trace),
            (std::vector<std::string>{"0,c03,idle", "0,c04,idle", "1800,c03,busy", "3600,c01,idle",
                                      "5400,c04,busy", "6300,c04,idle"}));
  EXPECT_EQ(imported.origin_s, ParseSacctTime("2026-11-01T00:00:00"));
  EXPECT_EQ(imported.end_s - imported.origin_s, 7200);
  EXPECT_EQ(imported.jobs_used, 4);
  EXPECT_EQ(imported.jobs_skipped, 1);  // 103 never started; the steps of 100 are not jobs
  EXPECT_EQ(imported.ignored_nodes, 1);
  EXPECT_EQ(imported.ignored_examples, std::vector<std::string>{"gpu1"});
}

TEST(SimImportSacct, AWindowStartsWithTheJobsRunningThenAndKeepsThoseRunningAtItsEnd) {
  SacctImportOptions options;
  options.machine_nodes = ExpandHostlist("c[01-04]");
  options.start_s = ParseSacctTime("2026-11-01T00:45:00");
  options.end_s = ParseSacctTime("2026-11-01T01:40:00");
  const ImportedTrace imported = ImportSacct(Fixture("sacct_small.txt"), options);
  // 104 starts at 5400 (trace 2700) and ends after the window: c04 stays busy to the end.
  EXPECT_EQ(Lines(imported.trace), (std::vector<std::string>{"0,c04,idle", "900,c01,idle", "2700,c04,busy"}));
  EXPECT_EQ(imported.jobs_used, 4);
}

TEST(SimImportSacct, BadLinesAreErrorsNamingFileAndLine) {
  SacctImportOptions options;
  options.machine_nodes = {"a1", "a2"};
  auto error = [&](const std::string& text) {
    const TempFile f(text);
    const std::string e = ErrorOf([&] { ImportSacct(f.path(), options); });
    return e.empty() ? e : e.substr(f.path().size());
  };
  const std::string header = "JobID|Start|End|NodeList\n";
  EXPECT_EQ(error("JobID|Start|NodeList\n1|5|a1\n").substr(0, 3), ":1:");
  EXPECT_NE(error(header + "1|5|9|a1\n2|7|3|a2\n").find(":3: job 2: End 3 is before Start 7"),
            std::string::npos);
  EXPECT_NE(error(header + "1|5|9\n").find(":2: expected 4 '|'-separated fields"), std::string::npos);
  EXPECT_NE(error(header + "1|yesterday|9|a1\n").find(":2: job 1: time \"yesterday\""), std::string::npos);
  EXPECT_NE(error(header + "1|5|9|a[1-\n").find(":2: job 1: NodeList: hostlist \"a[1-\""), std::string::npos);
  EXPECT_NE(error(header + "1|Unknown|Unknown|None assigned\n").find("no job ran on the machine's nodes"),
            std::string::npos);
  EXPECT_NE(error(header + "1|5|Unknown|a[1-2]\n2|6|9|a1\n").find("no node of the machine is idle"),
            std::string::npos);
  EXPECT_NE(error(header + "1|5|Unknown|a[1-2]\n").find("is not after the window's start (5): give the end"),
            std::string::npos);
  EXPECT_EQ(error(header + "1|5|9|a1\n"), "");  // --parsable's trailing '|' is accepted too:
  EXPECT_EQ(error("JobID|Start|End|NodeList|\n1|5|9|a1|\n"), "");
  options.machine_nodes = {"a1", "a1"};
  EXPECT_NE(ErrorOf([&] {
              ImportSacct(TempFile(header).path(), options);
            }).find("machine_nodes[1]: node \"a1\" is listed twice"),
            std::string::npos);
}

TEST(SimSacctReader, NodeNamesAreCountedPerFileBeforeTheLineThatPassesTheCapIsExpanded) {
  const TempFile f("JobID|NodeList\n1|a[1-3]\n1.0|a[1-3]\n2|b[1-3]\n");
  std::vector<std::string> seen;
  const std::string e = ErrorOf([&] {
    ForEachSacctJob(f.path(), {"JobID", "NodeList"}, {}, 5,
                    [&](SacctJobLine& job) { seen.insert(seen.end(), job.nodes.begin(), job.nodes.end()); });
  });
  // The step (1.0) is skipped; job 2 would make 6 names of at most 5: refused before any is made.
  EXPECT_NE(e.find(":4: job 2: NodeList: \"b[1-3]\" would take the file past 5 node names (it named 3 before "
                   "this line)"),
            std::string::npos)
      << e;
  EXPECT_EQ(seen, (std::vector<std::string>{"a1", "a2", "a3"}));
  EXPECT_NE(ErrorOf([&] {
              ForEachSacctJob(TempFile("NodeList|JobID|NodeList\n").path(), {"JobID", "NodeList"}, {}, 5,
                              [](SacctJobLine&) {});
            }).find(":1: the header names the column NodeList twice"),
            std::string::npos);
}

TEST(SimImportSwf, FixtureGivesTheHandComputedTrace) {
  SwfImportOptions options;
  options.procs_per_node = 4;
  const ImportedTrace imported = ImportSwf(Fixture("swf_small.swf"), options);
  // Job 1 takes n0-n1 over [0, 100); job 2 n2 over [15, 65); job 4 (5 requested processors) takes
  // n0-n1 over [100, 140) as job 1 frees them; jobs 3 and 5 never ran.
  EXPECT_EQ(Lines(imported.trace), (std::vector<std::string>{"0,n2,idle", "0,n3,idle", "15,n2,busy",
                                                             "65,n2,idle", "140,n0,idle", "140,n1,idle"}));
  EXPECT_EQ(imported.jobs_used, 3);
  EXPECT_EQ(imported.jobs_skipped, 2);
}

TEST(SimImportSwf, AJobThatDoesNotFitIsAnErrorNamingItsLine) {
  SwfImportOptions options;
  options.procs_per_node = 4;
  options.machine_nodes = 2;
  const std::string e = ErrorOf([&] { ImportSwf(Fixture("swf_small.swf"), options); });
  EXPECT_NE(e.find("swf_small.swf:7: job 2 needs 1 nodes at time 15 but only 0 of 2 are free"),
            std::string::npos)
      << e;
}

TEST(SimImportSwf, BadLinesAreErrorsNamingFileAndLine) {
  SwfImportOptions options;
  options.procs_per_node = 2;
  auto error = [&](const std::string& text) {
    const TempFile f(text);
    const std::string e = ErrorOf([&] { ImportSwf(f.path(), options); });
    return e.empty() ? e : e.substr(f.path().size());
  };
  const std::string ok = "1 0 0 10 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n";
  EXPECT_NE(
      error("; MaxNodes: 2\n" + ok + "2 0 0 10\n").find(":3: expected the 18 whitespace-separated fields"),
      std::string::npos);
  EXPECT_NE(error("; MaxNodes: 2\n2 0 x 10 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
                .find(":2: field 3: \"x\" is not"),
            std::string::npos);
  EXPECT_NE(error("; MaxNodes: 2\n2 0 1.5 10 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
                .find(":2: field 3 (wait time)"),
            std::string::npos);
  EXPECT_NE(
      error("; MaxNodes: 2\n2 0 0 10 -1 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1\n").find("no processor count"),
      std::string::npos);
  EXPECT_NE(error("; MaxNodes: two\n" + ok).find(":1: MaxNodes: expects a positive whole number"),
            std::string::npos);
  EXPECT_NE(error(ok).find("neither MaxNodes nor MaxProcs"), std::string::npos);
  EXPECT_EQ(error("; MaxProcs: 3\n" + ok), "");  // 3 processors at 2 per node: 2 nodes
}

TEST(SimImportOptions, IsValidNamesTheOffendingField) {
  std::string error;
  SacctImportOptions sacct;
  EXPECT_FALSE(sacct.IsValid(&error));
  EXPECT_EQ(error, "machine_nodes: empty (list every node of the machine)");
  sacct.machine_nodes = {"a1", "a2", "a1"};
  EXPECT_FALSE(sacct.IsValid(&error));
  EXPECT_EQ(error, "machine_nodes[2]: node \"a1\" is listed twice");
  sacct.machine_nodes = {"a1", "a2"};
  sacct.start_s = 100;
  sacct.end_s = 100;
  EXPECT_FALSE(sacct.IsValid(&error));
  EXPECT_EQ(error, "end_s (100) must be after start_s (100)");
  sacct.end_s = 101;
  EXPECT_TRUE(sacct.IsValid(&error));
  EXPECT_TRUE(sacct.IsValid(nullptr));

  SwfImportOptions swf;
  EXPECT_FALSE(swf.IsValid(&error));
  EXPECT_EQ(error, "procs_per_node: must be >= 1");
  swf.procs_per_node = 42;
  swf.machine_nodes = -1;
  EXPECT_FALSE(swf.IsValid(&error));
  EXPECT_EQ(error, "machine_nodes: must be >= 1 (or 0: from the header)");
  swf.machine_nodes = 0;
  EXPECT_TRUE(swf.IsValid(nullptr));
}

}  // namespace
}  // namespace bft::sim
