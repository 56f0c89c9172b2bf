// Helpers shared by the bft::sim suites.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bft/sim.h"

namespace bft::sim::testing {

// A job of 1..max_nodes nodes at 10 samples/s on one node and 18 on two, rescale costs 5 s up, 3 s down.
inline JobSpec MakeJob(const std::string& name, double submit, double work, int max_nodes = 2) {
  JobSpec j;
  j.name = name;
  j.submit_s = submit;
  j.min_nodes = 1;
  j.max_nodes = max_nodes;
  j.work = work;
  j.scale_up_s = 5.0;
  j.scale_down_s = 3.0;
  j.throughput = curve::ThroughputCurve({0, 1, 2}, {0.0, 10.0, 18.0});
  j.objective = j.throughput;
  return j;
}

// Two nodes; b is reclaimed at 100 and idle again at 200.
inline Trace TinyTrace() {
  return ParseTrace("time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n");
}

// Replay options ending at end_s, recording the assignments.
inline ReplayOptions Options(double end_s) {
  ReplayOptions o;
  o.end_s = end_s;
  o.record_assignments = true;
  return o;
}

// Replay options for a synthetic workload: the policy and accounting given, from time 0, recording
// the assignments.
inline ReplayOptions PolicyOptions(const std::string& policy, Accounting accounting) {
  ReplayOptions o;
  o.solve.solver = policy;
  o.accounting = accounting;
  o.start_s = 0;
  o.record_assignments = true;
  return o;
}

// Checks the invariants of one replay; `trace` must be the replayed trace.
inline void CheckInvariants(const Trace& trace, const std::vector<JobSpec>& jobs, const ReplayResult& r) {
  const Summary& s = r.summary;
  EXPECT_LE(s.used_node_hours, s.idle_node_hours * (1 + 1e-12));
  EXPECT_LE(s.samples_done, s.samples_without_losses * (1 + 1e-12));
  // Losses are charged in full: done - unpaid = without losses - losses.
  EXPECT_NEAR(s.samples_done - s.unpaid_loss_samples, s.samples_without_losses - s.loss_samples,
              1e-9 * s.samples_without_losses);
  EXPECT_NEAR(s.overhead_efficiency, 1.0 - s.loss_samples / s.samples_without_losses, 1e-12);
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    if (s.accounting == "continuous") {
      EXPECT_GE(r.jobs[j].done, 0.0);  // reference accounting lets it go below 0
    }
    EXPECT_LE(r.jobs[j].done, jobs[j].work);
    EXPECT_LE(r.jobs[j].partial_node_seconds, r.jobs[j].node_seconds * (1 + 1e-12));
    if (r.jobs[j].finish_s >= 0) {
      EXPECT_DOUBLE_EQ(r.jobs[j].done, jobs[j].work);
    }
  }
  for (const Step& st : r.steps) {
    EXPECT_LE(st.used_nodes, st.idle_nodes);
    EXPECT_LE(st.active_jobs, 10);
  }
  // Replays the assignment log against the trace: a node runs at most one job, only while idle.
  std::vector<int> owner(trace.node_names.size(), -1);
  std::vector<char> idle(trace.node_names.size(), 0);
  std::size_t next = 0;
  for (const AssignmentChange& a : r.assignments) {
    for (; next < trace.transitions.size() && static_cast<double>(trace.transitions[next].time_s) <= a.time_s;
         ++next) {
      const Transition& x = trace.transitions[next];
      idle[static_cast<std::size_t>(x.node)] = x.state == NodeState::kIdle;
    }
    const auto n = static_cast<std::size_t>(a.node);
    if (a.job >= 0) {
      ASSERT_EQ(owner[n], -1) << "node " << a.node << " given to job " << a.job << " at " << a.time_s
                              << " while running job " << owner[n];
      ASSERT_TRUE(idle[n]) << "node " << a.node << " given to a job at " << a.time_s << " while busy";
      owner[n] = a.job;
    } else {
      ASSERT_NE(owner[n], -1) << "node " << a.node << " released at " << a.time_s << " but held by no job";
      owner[n] = -1;
    }
  }
}

}  // namespace bft::sim::testing
