// libFuzzer target: the trace reader (ParseTrace) on arbitrary bytes. It must either return a
// trace that passes Trace::IsValid, whose statistics (ComputeTraceStats) are consistent, or throw a
// bft::Error; anything else (a crash, a sanitizer report, another exception type) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bft/sim.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const bft::sim::Trace trace = bft::sim::ParseTrace(text, "fuzz.csv");
    std::string error;
    if (!trace.IsValid(&error)) std::abort();  // the reader must only return valid traces
    const bft::sim::TraceStats stats = bft::sim::ComputeTraceStats(trace);
    const auto holes = static_cast<std::int64_t>(stats.hole_lengths_s.size());
    // Every idle transition opens a hole that ends (a busy transition) or is still open at the end.
    if (2 * holes + stats.holes_open_at_end != stats.transitions) std::abort();
    if (stats.p50_idle_nodes > stats.p90_idle_nodes || stats.p90_idle_nodes > stats.p99_idle_nodes ||
        stats.p99_idle_nodes > stats.max_idle_nodes || stats.mean_idle_nodes > stats.max_idle_nodes)
      std::abort();
  } catch (const bft::Error&) {
  }
  return 0;
}
