// libFuzzer target: the scheduler-log importers (sacct, SWF) and the hostlist expansion on
// arbitrary bytes. The first byte picks the importer (even: sacct, odd: SWF) and, for SWF, the
// processors per node; the rest is the log. Each must return a valid trace or throw a bft::Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "bft/sim.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string log(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    for (const std::string& name : bft::sim::ExpandHostlist(log.substr(0, log.find('\n')))) {
      if (name.empty()) std::abort();
    }
  } catch (const bft::InvalidArgument&) {
  }
  static const std::string path = "/tmp/bft_fuzz_log_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << log;
  try {
    bft::sim::ImportedTrace imported;
    if (data[0] % 2 == 0) {
      bft::sim::SacctImportOptions options;
      options.machine_nodes = bft::sim::ExpandHostlist("c[0-7],gpu[01-02]");
      imported = bft::sim::ImportSacct(path, options);
    } else {
      bft::sim::SwfImportOptions options;
      options.procs_per_node = 1 + data[0] % 8;
      options.machine_nodes = 64;  // a header's MaxNodes of a million would only test the fuzzer's patience
      imported = bft::sim::ImportSwf(path, options);
    }
    std::string error;
    if (!imported.trace.IsValid(&error) || imported.trace.transitions.empty() || imported.jobs_used < 1 ||
        imported.end_s < imported.origin_s) {
      std::abort();
    }
  } catch (const bft::Error&) {
  }
  return 0;
}
