// Helpers shared by the bft::sim suites.
#pragma once

#include <string>

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

}  // namespace bft::sim::testing
