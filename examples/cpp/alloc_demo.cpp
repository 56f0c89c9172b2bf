// alloc_demo: one allocator event, as a C++ scheduler would drive bft::alloc.
//
// Three elastic jobs run on a pool of idle nodes; the main scheduler has just taken two nodes back
// (one job fell below its minimum) and three nodes have become idle. The exact solver decides the
// new map; the equal-share heuristic and (when built with GLPK) the count-level MILP are shown for
// comparison.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bft/alloc.h"
#ifdef BFT_HAVE_GLPK
#include "bft/milp_glpk.h"
#endif

namespace {

bft::alloc::Job MakeJob(const std::string& id, int min_nodes, int max_nodes, std::vector<int> nodes,
                        std::vector<double> samples_per_s) {
  bft::alloc::Job job;
  job.id = id;
  job.min_nodes = min_nodes;
  job.max_nodes = max_nodes;
  job.objective = bft::curve::ThroughputCurve(nodes, samples_per_s);
  job.throughput = job.objective;
  job.scale_up_s = 18.0;
  job.scale_down_s = 12.0;
  return job;
}

std::string List(const std::vector<bft::alloc::NodeId>& nodes) {
  std::string out = "{";
  for (std::size_t k = 0; k < nodes.size(); ++k) out += (k ? "," : "") + std::to_string(nodes[k]);
  return out + "}";
}

void Print(const bft::alloc::Allocation& a) {
  std::printf("solver %-11s objective %12.1f  %s  (%.3f ms)\n", a.solver.c_str(), a.objective,
              bft::alloc::ToString(a.status), a.wall_time_s * 1e3);
  for (const bft::alloc::JobAllocation& j : a.jobs)
    std::printf(
        "  %-9s %2d -> %2d nodes  rate %8.1f samples/s  penalty %9.1f  kept %s added %s released %s\n",
        j.id.c_str(), j.nodes_before, j.nodes_after, j.rate, j.penalty, List(j.kept).c_str(),
        List(j.added).c_str(), List(j.released).c_str());
}

}  // namespace

int main() {
#ifdef BFT_HAVE_GLPK
  bft::milp::RegisterGlpkBackend();
#endif
  bft::alloc::Problem problem;
  problem.jobs.push_back(MakeJob("resnet18", 1, 8, {1, 2, 4, 8}, {5219, 10583, 20436, 39584}));
  problem.jobs.push_back(MakeJob("vgg16", 2, 8, {1, 2, 4, 8}, {1193, 2389, 4692, 9258}));
  problem.jobs.push_back(MakeJob("alexnet", 4, 8, {1, 2, 4, 8}, {7115, 13072, 21066, 40485}));
  // Idle nodes now: 1..4 and 7 still run jobs; 9, 10, 11 just became idle; 5 and 6 were reclaimed.
  problem.pool = {1, 2, 3, 4, 7, 8, 9, 10, 11};
  problem.current = {{1, "resnet18"}, {2, "resnet18"}, {3, "vgg16"},
                     {4, "vgg16"},    {7, "alexnet"},  {8, "alexnet"}};
  problem.tfwd_s = 120.0;

  std::string error;
  if (!problem.IsValid(&error)) {
    std::fprintf(stderr, "invalid problem: %s\n", error.c_str());
    return 1;
  }
  const bft::alloc::Allocation exact = bft::alloc::Solve(problem);
  Print(exact);
  bft::alloc::SolveOptions options;
  options.solver = "equal_share";
  const bft::alloc::Allocation equal = bft::alloc::Solve(problem, options);
  Print(equal);
  if (equal.objective > exact.objective + 1e-6) return 1;  // the heuristic can never beat the optimum
#ifdef BFT_HAVE_GLPK
  options.solver = "count_milp";
  options.milp_backend = "glpk";
  const bft::alloc::Allocation milp = bft::alloc::Solve(problem, options);
  Print(milp);
  if (std::abs(milp.objective - exact.objective) > 1e-6 * std::abs(exact.objective)) return 1;
#endif
  std::printf("new map:");
  for (const bft::alloc::Assignment& x : exact.map)
    std::printf(" %lld:%s", static_cast<long long>(x.node), x.job.c_str());
  std::printf("\n");
  return 0;
}
