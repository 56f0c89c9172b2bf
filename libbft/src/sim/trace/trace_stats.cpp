// sim::ComputeTraceStats: idle nodes over time and idle-hole lengths of a trace (bft/sim.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bft/sim.h"

namespace bft::sim {
namespace {

// The smallest count c such that the counts <= c last at least `q` of `total_s`.
std::int64_t TimeWeightedPercentile(const std::vector<std::pair<std::int64_t, double>>& sorted_counts,
                                    double total_s, double q) {
  double covered = 0.0;
  for (const auto& [count, seconds] : sorted_counts) {
    covered += seconds;
    if (covered >= q * total_s) return count;
  }
  return sorted_counts.empty() ? 0 : sorted_counts.back().first;
}

}  // namespace

TraceStats ComputeTraceStats(const Trace& trace) {
  std::string error;
  if (!trace.IsValid(&error)) throw InvalidArgument("trace: " + error);
  TraceStats stats;
  stats.nodes = static_cast<std::int64_t>(trace.node_names.size());
  stats.transitions = static_cast<std::int64_t>(trace.transitions.size());
  stats.start_s = trace.first_time_s();
  stats.end_s = trace.last_time_s();

  std::vector<std::int64_t> idle_since(trace.node_names.size(), -1);  // -1: busy
  std::vector<std::pair<std::int64_t, double>> count_seconds;         // (idle count, seconds it lasted)
  std::int64_t idle = 0;
  const auto& tr = trace.transitions;
  for (std::size_t i = 0; i < tr.size();) {
    const std::int64_t t = tr[i].time_s;
    for (; i < tr.size() && tr[i].time_s == t; ++i) {
      std::int64_t& since = idle_since[static_cast<std::size_t>(tr[i].node)];
      if (tr[i].state == NodeState::kIdle) {
        since = t;
        ++idle;
      } else {
        stats.hole_lengths_s.push_back(static_cast<double>(t - since));
        since = -1;
        --idle;
      }
    }
    stats.step_time_s.push_back(t);
    stats.step_idle_nodes.push_back(idle);
    stats.max_idle_nodes = std::max(stats.max_idle_nodes, idle);
    const double lasts_s = static_cast<double>((i < tr.size() ? tr[i].time_s : t) - t);
    if (lasts_s > 0) count_seconds.emplace_back(idle, lasts_s);
    stats.idle_node_s += static_cast<double>(idle) * lasts_s;
  }
  stats.holes_open_at_end = idle;
  std::sort(stats.hole_lengths_s.begin(), stats.hole_lengths_s.end());

  const double span_s = static_cast<double>(stats.end_s - stats.start_s);
  if (span_s > 0) {
    stats.mean_idle_nodes = stats.idle_node_s / span_s;
    stats.events_per_hour = static_cast<double>(stats.step_time_s.size()) * 3600.0 / span_s;
    std::sort(count_seconds.begin(), count_seconds.end());
    stats.p50_idle_nodes = TimeWeightedPercentile(count_seconds, span_s, 0.50);
    stats.p90_idle_nodes = TimeWeightedPercentile(count_seconds, span_s, 0.90);
    stats.p99_idle_nodes = TimeWeightedPercentile(count_seconds, span_s, 0.99);
  }
  return stats;
}

}  // namespace bft::sim
