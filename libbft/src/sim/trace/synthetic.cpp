// The synthetic idle-node trace and job mix of `bft replay`'s embedded default (docs/sim.md).
//
// Everything is drawn from one xoshiro256** stream seeded through splitmix64, with the variates
// computed here (not by <random>'s distributions, whose algorithms differ between standard
// libraries), so a seed gives the same trace and jobs everywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include "bft/sim.h"

namespace bft::sim {
namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& s : s_) s = SplitMix(seed);
  }
  std::uint64_t Next() {
    const std::uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double a, double b) { return a + (b - a) * Uniform(); }
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal by Box-Muller (one of the pair).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // 1 + a geometric count: mean `mean` (>= 1).
  int GeometricAtLeastOne(double mean) {
    if (mean <= 1.0) return 1;
    const double p = 1.0 / mean;
    return 1 + static_cast<int>(std::floor(std::log1p(-Uniform()) / std::log1p(-p)));
  }
  std::uint64_t Below(std::uint64_t n) { return Next() % n; }

 private:
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t SplitMix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

// A model family of the job mix: X(n) = per_node * n / (1 + serial * (n - 1)) samples/s.
struct Family {
  const char* name;
  double per_node;  // samples/s on one node
  double serial;    // contention: 0 scales linearly
};
constexpr Family kFamilies[] = {
    {"convnet", 2400.0, 0.004},    // scales well
    {"resnet", 900.0, 0.012},      // good scaling, slower per node
    {"mlp", 6000.0, 0.06},         // fast per node, saturates early
    {"transformer", 350.0, 0.002}  // slow per node, near-linear
};

double Round(double x, double unit) { return std::round(x / unit) * unit; }

}  // namespace

bool SyntheticOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& what) {
    if (error) *error = what;
    return false;
  };
  if (nodes < 1 || nodes > 1000000) return fail("nodes must be in [1, 1000000]");
  if (!std::isfinite(duration_s) || duration_s < 1) return fail("duration_s must be finite and >= 1");
  if (!std::isfinite(mean_idle_nodes) || mean_idle_nodes <= 0 || mean_idle_nodes > nodes) {
    return fail("mean_idle_nodes must be in (0, nodes]");
  }
  if (!std::isfinite(mean_block_nodes) || mean_block_nodes < 1) return fail("mean_block_nodes must be >= 1");
  if (!std::isfinite(median_idle_s) || median_idle_s < 1) return fail("median_idle_s must be >= 1");
  if (!std::isfinite(idle_sigma) || idle_sigma < 0 || idle_sigma > 4)
    return fail("idle_sigma must be in [0, 4]");
  if (jobs < 0 || jobs > 1000000) return fail("jobs must be in [0, 1000000]");
  if (!std::isfinite(mean_interarrival_s) || mean_interarrival_s < 0) {
    return fail("mean_interarrival_s must be finite and >= 0");
  }
  return true;
}

SyntheticWorkload GenerateSynthetic(const SyntheticOptions& o) {
  std::string error;
  if (!o.IsValid(&error)) throw InvalidArgument("synthetic options: " + error);
  Rng rng(o.seed);
  SyntheticWorkload w;

  // Node names n000, n001, ...
  const int width = std::max(3, static_cast<int>(std::to_string(o.nodes - 1).size()));
  for (int i = 0; i < o.nodes; ++i) {
    std::string digits = std::to_string(i);
    w.trace.node_names.push_back("n" + std::string(static_cast<std::size_t>(width) - digits.size(), '0') +
                                 digits);
  }

  // Blocks of nodes become idle together (a main-scheduler job ended) as a Poisson process whose
  // rate makes the time-average of idle nodes about mean_idle_nodes (Little's law).
  const double mean_idle_s = o.median_idle_s * std::exp(0.5 * o.idle_sigma * o.idle_sigma);
  const double blocks_per_s = o.mean_idle_nodes / (o.mean_block_nodes * mean_idle_s);
  std::vector<char> idle(static_cast<std::size_t>(o.nodes), 0);
  using Reclaim = std::pair<std::int64_t, NodeId>;  // (time, node), earliest first
  std::priority_queue<Reclaim, std::vector<Reclaim>, std::greater<Reclaim>> reclaims;
  const auto duration = static_cast<std::int64_t>(o.duration_s);
  double clock = 0.0;
  while (true) {
    clock += rng.Exponential(1.0 / blocks_per_s);
    const auto t = static_cast<std::int64_t>(std::ceil(clock));
    if (t >= duration) break;
    // Nodes reclaimed before t go busy first (a node reclaimed at t stays idle until after t).
    while (!reclaims.empty() && reclaims.top().first < t) {
      const auto [rt, node] = reclaims.top();
      reclaims.pop();
      idle[static_cast<std::size_t>(node)] = 0;
      w.trace.transitions.push_back({rt, node, NodeState::kBusy});
    }
    // The block: a run of busy nodes from a random position (batch schedulers hand out
    // neighbouring nodes), size 1 + geometric.
    const int size = std::min(rng.GeometricAtLeastOne(o.mean_block_nodes), o.nodes);
    const auto first = static_cast<int>(rng.Below(static_cast<std::uint64_t>(o.nodes)));
    std::vector<NodeId> block;
    for (int k = 0; k < o.nodes && static_cast<int>(block.size()) < size; ++k) {
      const int node = (first + k) % o.nodes;
      if (!idle[static_cast<std::size_t>(node)]) block.push_back(node);
    }
    // Idle period: lognormal. Half of the blocks are reclaimed all at once, the others node by
    // node at uniform times in the second half of the period.
    const double period = std::max(1.0, o.median_idle_s * std::exp(o.idle_sigma * rng.Normal()));
    const bool together = rng.Uniform() < 0.5;
    for (const NodeId node : block) {
      idle[static_cast<std::size_t>(node)] = 1;
      w.trace.transitions.push_back({t, node, NodeState::kIdle});
      const double d = together ? period : period * rng.Uniform(0.5, 1.0);
      reclaims.push({t + std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(d))), node});
    }
  }
  while (!reclaims.empty() && reclaims.top().first < duration) {
    const auto [rt, node] = reclaims.top();
    reclaims.pop();
    w.trace.transitions.push_back({rt, node, NodeState::kBusy});
  }
  std::stable_sort(w.trace.transitions.begin(), w.trace.transitions.end(),
                   [](const Transition& a, const Transition& b) {
                     return a.time_s != b.time_s ? a.time_s < b.time_s : a.node < b.node;
                   });

  // Jobs: Poisson arrivals from time 0; a family, a size limit and an amount of work each.
  const std::vector<int> breakpoints = {0, 1, 2, 4, 8, 16, 32, 64};
  double submit = 0.0;
  for (int i = 0; i < o.jobs; ++i) {
    if (i > 0) submit += rng.Exponential(o.mean_interarrival_s);
    const Family& f = kFamilies[rng.Below(std::size(kFamilies))];
    JobSpec job;
    char name[64];
    std::snprintf(name, sizeof(name), "J%03d-%s", i, f.name);
    job.name = name;
    job.submit_s = std::round(submit);
    job.min_nodes = 1;
    const int caps[] = {16, 32, 64};
    job.max_nodes = caps[rng.Below(3)];
    const double jitter = rng.Uniform(0.8, 1.2);  // per-job speed variation
    std::vector<int> nodes;
    std::vector<double> values;
    for (const int n : breakpoints) {
      if (n > job.max_nodes) break;
      nodes.push_back(n);
      values.push_back(n == 0 ? 0.0 : Round(jitter * f.per_node * n / (1.0 + f.serial * (n - 1)), 0.1));
    }
    job.throughput = curve::ThroughputCurve(nodes, values);
    job.objective = job.throughput;
    // Work: what 8 nodes would process in 2 to 12 hours.
    job.work = Round(job.throughput.Evaluate(8.0) * rng.Uniform(2.0, 12.0) * 3600.0, 1000.0);
    job.scale_up_s = Round(rng.Uniform(15.0, 20.0), 0.001);
    job.scale_down_s = Round(rng.Uniform(10.0, 13.0), 0.001);
    w.jobs.push_back(std::move(job));
  }
  return w;
}

}  // namespace bft::sim
