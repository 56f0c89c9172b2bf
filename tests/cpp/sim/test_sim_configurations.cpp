// Configurations (structured partial backpropagation) in the workload format and the replay:
// reading and writing them, accounting computed by hand, and the plain policy as a special case.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bft/sim.h"
#include "sim_test_util.h"

namespace bft::sim {
namespace {

using testing::CheckInvariants;
using testing::MakeJob;
using testing::Options;
using testing::PolicyOptions;
using testing::TinyTrace;

// MakeJob's job (10/s on 1 node, 18/s on 2; up 5 s, down 3 s) with a configuration "spb" of
// efficiency 0.5 processing 12 and 40 samples/s: worth 6 and 20. It wins on 2 nodes (20 > 18) and
// loses on 1 (6 < 10).
JobSpec JobWithPartialBackprop(const std::string& name, double submit, double work) {
  JobSpec j = MakeJob(name, submit, work);
  alloc::Configuration spb;
  spb.name = "spb";
  spb.efficiency = 0.5;
  spb.throughput = curve::ThroughputCurve({0, 1, 2}, {0.0, 12.0, 40.0});
  spb.objective = spb.throughput;
  j.configurations = {spb};
  return j;
}

std::string ErrorOf(const std::string& text) {
  try {
    ParseJobs(text, "j.jsonl");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kHead =
    R"({"name": "a", "submit": 5, "min_nodes": 1, "max_nodes": 4, "work": 1000.0, "scale_up_s": 10, )"
    R"("scale_down_s": 5, "nodes": [0, 1, 2, 4], "throughput": [0.0, 10.0, 18.0, 30.0])";

TEST(SimJobsConfigurations, AreReadWithTheJobsNodesUnlessTheyHaveTheirOwn) {
  const std::vector<JobSpec> jobs = ParseJobs(
      std::string(kHead) +
      R"(, "configurations": [{"name": "spb-2", "efficiency": 0.8, "throughput": [0, 14, 26, 48]}, )"
      R"({"name": "spb-1", "efficiency": 0.6, "nodes": [1, 4], "throughput": [16, 64], "objective": [1, 2]}]})");
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_EQ(jobs[0].configurations.size(), 2u);
  const alloc::Configuration& a = jobs[0].configurations[0];
  EXPECT_EQ(a.name, "spb-2");
  EXPECT_EQ(a.efficiency, 0.8);
  EXPECT_EQ(a.throughput.nodes(), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(a.throughput.values(), (std::vector<double>{0, 14, 26, 48}));
  EXPECT_EQ(a.objective.values(), a.throughput.values());  // objective defaults to throughput
  const alloc::Configuration& b = jobs[0].configurations[1];
  EXPECT_EQ(b.throughput.nodes(), (std::vector<int>{1, 4}));
  EXPECT_EQ(b.objective.values(), (std::vector<double>{1, 2}));
  // An empty list and no list are the same: no configurations.
  EXPECT_TRUE(ParseJobs(std::string(kHead) + R"(, "configurations": []})")[0].configurations.empty());
  EXPECT_TRUE(ParseJobs(std::string(kHead) + "}")[0].configurations.empty());
}

TEST(SimJobsConfigurations, SurviveAWriteAndARead) {
  JobSpec j = JobWithPartialBackprop("j", 3, 500);
  j.configurations[0].objective = curve::ThroughputCurve({0, 1, 2}, {0.0, 1.5, 2.5});
  const std::string path = ::testing::TempDir() + "/configurations.jsonl";
  WriteJobs({j, MakeJob("plain", 4, 100)}, path);
  const std::vector<JobSpec> back = ReadJobs(path);
  ASSERT_EQ(back.size(), 2u);
  ASSERT_EQ(back[0].configurations.size(), 1u);
  EXPECT_EQ(back[0].configurations[0].name, "spb");
  EXPECT_EQ(back[0].configurations[0].efficiency, 0.5);
  EXPECT_EQ(back[0].configurations[0].throughput.values(), j.configurations[0].throughput.values());
  EXPECT_EQ(back[0].configurations[0].objective.values(), (std::vector<double>{0.0, 1.5, 2.5}));
  EXPECT_TRUE(back[1].configurations.empty());
}

TEST(SimJobsConfigurations, BadOnesAreReportedWithFileLineJobAndIndex) {
  auto with = [](const std::string& configurations) {
    return ErrorOf(std::string(kHead) + R"(, "configurations": )" + configurations + "}");
  };
  EXPECT_EQ(with(R"([{"name": "s", "throughput": [0, 1, 2, 3]}])"),
            "j.jsonl:1: job \"a\": \"configurations\"[0]: missing field \"efficiency\"");
  EXPECT_EQ(
      with(R"([{"name": "s", "efficiency": 1, "throughput": [0, 1, 2, 3]}, {"name": "t", "efficiency": 1}])"),
      "j.jsonl:1: job \"a\": \"configurations\"[1]: missing field \"throughput\"");
  EXPECT_EQ(
      with(R"([{"name": "s", "efficiency": 1, "speed": 2, "throughput": [0, 1, 2, 3]}])"),
      "j.jsonl:1: job \"a\": \"configurations\"[0]: unknown field \"speed\" (known: name, efficiency, nodes, "
      "throughput, objective)");
  EXPECT_EQ(with(R"([{"name": "s", "efficiency": 1, "throughput": [0, 1, 2]}])"),
            "j.jsonl:1: job \"a\": \"configurations\"[0]: \"throughput\" has 3 values but \"nodes\" has 4");
  EXPECT_EQ(with(R"([{"name": "s", "efficiency": 1, "nodes": [1, 2.5], "throughput": [1, 2]}])"),
            "j.jsonl:1: job \"a\": \"configurations\"[0]: \"nodes\"[1]: expected a whole number, found 2.5");
  EXPECT_EQ(with(R"([{"name": 3, "efficiency": 1, "throughput": [0, 1, 2, 3]}])"),
            "j.jsonl:1: job \"a\": \"configurations\"[0]: \"name\": expected a string, found 3");
  EXPECT_EQ(with(R"([{"name": "s", "efficiency": 1.5, "throughput": [0, 1, 2, 3]}])"),
            "j.jsonl:1: job \"a\": configurations[0]: efficiency 1.5 must be in (0, 1]");
  EXPECT_EQ(with(R"([{"name": "full", "efficiency": 1, "throughput": [0, 1, 2, 3]}])"),
            "j.jsonl:1: job \"a\": configurations[0]: name 'full' is taken (it is the job's own curves)");
  EXPECT_EQ(with(R"([{"name": "s", "efficiency": 1, "throughput": [0, 1, 2, 3]}, )"
                 R"({"name": "s", "efficiency": 1, "throughput": [0, 1, 2, 3]}])"),
            "j.jsonl:1: job \"a\": configurations[1]: name \"s\" is taken");
  EXPECT_EQ(with(R"([{"name": "s", "efficiency": 1, "throughput": [0, 1, 2, 1e13]}])"),
            "j.jsonl:1: job \"a\": configurations[0] (\"s\"): throughput: 1e+13 samples/s exceeds 1e+12");
  EXPECT_EQ(
      with("[1, 2]"),
      "j.jsonl:1: job \"a\": \"configurations\": expected an array of objects, found an array of numbers");
  EXPECT_EQ(with(R"("spb")"),
            "j.jsonl:1: job \"a\": \"configurations\": expected an array of objects, found \"spb\"");
  // The JSON reader: objects only in an array, one level deep, not mixed with numbers.
  EXPECT_EQ(with(R"({"name": "s"})"),
            "j.jsonl:1: malformed JSON: column " + std::to_string(std::string(kHead).size() + 21) +
                ": \"configurations\": an object is not supported as a value (only in an array of objects)");
  EXPECT_NE(
      with(R"([{"name": "s", "inner": [{"x": 1}]}])").find("objects nested this deep are not supported"),
      std::string::npos);
  EXPECT_NE(with(R"([{"name": "s"}, 3])").find("an array of objects may hold objects only"),
            std::string::npos);
  EXPECT_NE(with(R"([3, {"name": "s"}])").find("arrays may hold numbers only"), std::string::npos);
  EXPECT_NE(with(R"([{"name": "s",}])").find("expected a field name"), std::string::npos);
}

TEST(SimReplayConfigurations, TinyTraceMatchesTheAccountingComputedByHand) {
  // t = 0: not running, so no charge: 2 nodes in spb (10 s x 20 = 200 beats full's 180).
  // [0,100): 2000. At 100 b is reclaimed: preemption 3 s x 20 = 60. On 1 node spb is worth 6 and
  // full 10, less the restart of a switch, 5 s x 6 = 30 over 10 s: 7 > 6, so the job switches to
  // full on the same node and pays 5 s x 6 = 30. [100,200): 1000. At 200 b is idle: 2 nodes in spb
  // (200 - 5 s x 10 = 150) beats 2 in full (180 - 50) and 1 in full (100): a growth and a switch,
  // one charge, 5 s x 10 = 50. [200,300): 2000.
  const ReplayResult r = Replay(TinyTrace(), {JobWithPartialBackprop("j", 0, 1e6)}, Options(300));
  const Summary& s = r.summary;
  EXPECT_DOUBLE_EQ(s.samples_without_losses, 2000 + 1000 + 2000);
  EXPECT_DOUBLE_EQ(s.loss_samples, 60 + 30 + 50);
  EXPECT_DOUBLE_EQ(s.samples_done, 5000 - 140);
  EXPECT_EQ(s.rescales, 1);
  EXPECT_EQ(s.preemptions, 1);
  EXPECT_EQ(s.configuration_switches, 2);
  EXPECT_EQ(r.jobs[0].configuration_switches, 2);
  EXPECT_DOUBLE_EQ(r.jobs[0].partial_node_seconds, 200 + 200);
  EXPECT_DOUBLE_EQ(s.partial_node_hours, 400.0 / 3600.0);
  EXPECT_EQ(s.configurations, "choose");
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_DOUBLE_EQ(r.steps[0].rate, 20);
  EXPECT_DOUBLE_EQ(r.steps[1].rate, 10);
  EXPECT_DOUBLE_EQ(r.steps[1].samples_done, 2000 - 60 - 30);
  EXPECT_DOUBLE_EQ(r.steps[2].rate, 20);
  CheckInvariants(TinyTrace(), {JobWithPartialBackprop("j", 0, 1e6)}, r);
}

TEST(SimReplayConfigurations, WorkCountsSamplesAtFullBackpropagation) {
  // Work 1000 in spb on 2 nodes from 0: 40 samples/s worth 20, so it finishes at 50, not at 25.
  const ReplayResult r = Replay(TinyTrace(), {JobWithPartialBackprop("j", 0, 1000)}, Options(300));
  EXPECT_NEAR(r.jobs[0].finish_s, 50, 1e-9);
  EXPECT_DOUBLE_EQ(r.jobs[0].done, 1000);
  EXPECT_DOUBLE_EQ(r.jobs[0].partial_node_seconds, 100);
}

TEST(SimReplayConfigurations, FullOnlyIsThePlainPolicy) {
  // --configurations full replays as if the job declared none: the figures of the plain replay.
  ReplayOptions o = Options(300);
  o.configurations = ConfigurationMode::kFullOnly;
  const ReplayResult full = Replay(TinyTrace(), {JobWithPartialBackprop("j", 0, 1e6)}, o);
  const ReplayResult plain = Replay(TinyTrace(), {MakeJob("j", 0, 1e6)}, Options(300));
  EXPECT_DOUBLE_EQ(full.summary.samples_done, plain.summary.samples_done);
  EXPECT_DOUBLE_EQ(full.summary.samples_done, 1800 - 54 + 1000 - 50 + 1800);
  EXPECT_EQ(full.summary.configuration_switches, 0);
  EXPECT_EQ(full.summary.partial_node_hours, 0);
  EXPECT_EQ(full.summary.configurations, "full");
}

// The synthetic workload with a configuration added to every job.
SyntheticWorkload WithConfigurations(double efficiency, double speedup) {
  SyntheticOptions so;
  so.nodes = 96;
  so.duration_s = 12 * 3600;
  so.mean_idle_nodes = 30;
  so.jobs = 14;
  SyntheticWorkload w = GenerateSynthetic(so);
  for (JobSpec& j : w.jobs) {
    std::vector<double> values = j.throughput.values();
    for (double& v : values) v *= speedup;
    alloc::Configuration c;
    c.name = "spb";
    c.efficiency = efficiency;
    c.throughput = curve::ThroughputCurve(j.throughput.nodes(), values);
    c.objective = c.throughput;
    j.configurations = {c};
  }
  return w;
}

TEST(SimReplayConfigurations, AConfigurationNeverWorthTakingChangesNothing) {
  // Worth efficiency x speedup = 0.9 of full at every count: no policy takes it, and every replay
  // equals the one without it, in both accountings.
  const SyntheticWorkload w = WithConfigurations(0.6, 1.5);
  std::vector<JobSpec> plain = w.jobs;
  for (JobSpec& j : plain) j.configurations.clear();
  for (const std::string kind : {"exact", "equal_share", "completion_aware"}) {
    for (const Accounting accounting : {Accounting::kContinuous, Accounting::kReference}) {
      const ReplayOptions o = PolicyOptions(kind, accounting);
      SCOPED_TRACE(kind + " " + ToString(accounting));
      const ReplayResult a = Replay(w.trace, w.jobs, o);
      const ReplayResult b = Replay(w.trace, plain, o);
      EXPECT_EQ(a.summary.samples_done, b.summary.samples_done);
      EXPECT_EQ(a.summary.mean_turnaround_s, b.summary.mean_turnaround_s);
      EXPECT_EQ(a.summary.rescales, b.summary.rescales);
      EXPECT_EQ(a.summary.partial_node_hours, 0);
    }
  }
}

TEST(SimReplayConfigurations, AConfigurationWorthMoreIsTakenAndKeepsTheInvariants) {
  // Worth 0.8 x 1.5 = 1.2 of full: the exact policies run in it (equal share keeps full
  // backpropagation) and process more than the plain policy.
  const SyntheticWorkload w = WithConfigurations(0.8, 1.5);
  for (const std::string kind : {"exact", "equal_share", "lifetime_aware"}) {
    for (const Accounting accounting : {Accounting::kContinuous, Accounting::kReference}) {
      ReplayOptions o = PolicyOptions(kind, accounting);
      SCOPED_TRACE(kind + " " + ToString(accounting));
      const ReplayResult r = Replay(w.trace, w.jobs, o);
      CheckInvariants(w.trace, w.jobs, r);
      o.configurations = ConfigurationMode::kFullOnly;
      const ReplayResult full = Replay(w.trace, w.jobs, o);
      if (kind == "equal_share") {
        EXPECT_EQ(r.summary.partial_node_hours, 0);
        EXPECT_EQ(r.summary.samples_done, full.summary.samples_done);
      } else {
        EXPECT_GT(r.summary.partial_node_hours, 0.9 * r.summary.used_node_hours);
        EXPECT_GT(r.summary.samples_done, full.summary.samples_done);
      }
    }
  }
}

TEST(SimReplayConfigurationsLearned, EachConfigurationsCurveIsLearnedInRawSamples) {
  // Learned curves. Nodes a and b stay idle; c comes and goes every 10 minutes, so the allocator
  // decides again and again. In spb the job processes 40 samples/s on 2 nodes, worth 20 > 18 in
  // full. Once both are measured it must settle in spb: an advisor that learned spb's curve in
  // full-backpropagation samples (20/s) would have it worth 0.5 x 20 = 10 < 18, and settle in full.
  std::string text = "time,node,state\n0,a,idle\n0,b,idle\n";
  for (int t = 600; t < 86400; t += 1200) {
    text += std::to_string(t) + ",c,idle\n" + std::to_string(t + 600) + ",c,busy\n";
  }
  const Trace trace = ParseTrace(text);
  ReplayOptions o;
  o.curves = CurveMode::kLearned;
  const ReplayResult r = Replay(trace, {JobWithPartialBackprop("j", 0, 1e9)}, o);
  EXPECT_GT(r.jobs[0].partial_node_seconds, 0.8 * r.jobs[0].node_seconds);
  EXPECT_GE(r.jobs[0].configuration_switches, 1);
  o.configurations = ConfigurationMode::kFullOnly;
  const ReplayResult full = Replay(trace, {JobWithPartialBackprop("j", 0, 1e9)}, o);
  EXPECT_EQ(full.jobs[0].partial_node_seconds, 0);
  EXPECT_GT(r.summary.samples_done, full.summary.samples_done);
}

}  // namespace
}  // namespace bft::sim
