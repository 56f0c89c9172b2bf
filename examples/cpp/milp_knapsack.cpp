// A small MILP with a piecewise-linear term, solved on every backend this libbft was built with.
//
// Eight idle nodes are split between two training jobs. Job A's throughput grows linearly; job B's
// is a non-concave piecewise-linear curve (it only pays off once it has 4 nodes). Maximise the
// total throughput, then check the answer against enumeration of every split.
//
// Build against an installed libbft:  find_package(bft) + target_link_libraries(... bft::bft bft::glpk)
#include <cmath>
#include <cstdio>
#include <vector>

#include "bft/milp.h"
#ifdef BFT_HAVE_GLPK
#include "bft/milp_glpk.h"
#endif
#ifdef BFT_HAVE_CBC
#include "bft/milp_cbc.h"
#endif

namespace milp = bft::milp;

int main() {
#ifdef BFT_HAVE_GLPK
  milp::RegisterGlpkBackend();
#endif
#ifdef BFT_HAVE_CBC
  milp::RegisterCbcBackend();
#endif
  const std::vector<double> nodes_b = {0, 2, 4, 8};
  const std::vector<double> speed_b = {0, 1, 9, 12};  // samples/s (x1000) of job B on n nodes
  const double speed_a_per_node = 2.0;
  const int total_nodes = 8;

  milp::Model model("two_jobs");
  milp::Var a = model.AddInteger(0, total_nodes, "nodes_a");
  milp::Var b = model.AddInteger(0, total_nodes, "nodes_b");
  milp::Var tput_b = model.AddPiecewiseLinear(b, nodes_b, speed_b, "samples_per_s_b");
  model.AddConstraint(a + b <= total_nodes, "idle_nodes");
  model.Maximize(speed_a_per_node * a + tput_b);

  // The answer by enumeration (piecewise-linear interpolation of job B's curve).
  auto speed_b_at = [&](double n) {
    for (std::size_t k = 0; k + 1 < nodes_b.size(); ++k) {
      if (n <= nodes_b[k + 1]) {
        return speed_b[k] + (speed_b[k + 1] - speed_b[k]) * (n - nodes_b[k]) / (nodes_b[k + 1] - nodes_b[k]);
      }
    }
    return speed_b.back();
  };
  double best = -1;
  for (int na = 0; na <= total_nodes; ++na) {
    for (int nb = 0; na + nb <= total_nodes; ++nb)
      best = std::fmax(best, speed_a_per_node * na + speed_b_at(nb));
  }

  const auto backends = milp::RegisteredBackends();
  if (backends.empty()) {
    std::printf("no MILP backend was built; nothing to solve\n");
    return 0;
  }
  int failures = 0;
  for (const std::string& backend : backends) {
    milp::SolveOptions options;
    options.time_limit_s = 10;
    const milp::Result r = milp::Solve(model, backend, options);
    if (!r.optimal()) {
      std::printf("%s: %s (%s)\n", backend.c_str(), milp::ToString(r.termination), r.message.c_str());
      ++failures;
      continue;
    }
    std::printf("%-5s %s: nodes A=%g B=%g, throughput %g (enumeration: %g), %.4f s\n", backend.c_str(),
                milp::ToString(r.termination), r.Value(a), r.Value(b), r.objective, best, r.wall_time_s);
    if (std::fabs(r.objective - best) > 1e-6 || std::fabs(r.Value(tput_b) - speed_b_at(r.Value(b))) > 1e-6) {
      std::printf("%s: WRONG ANSWER\n", backend.c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
