// libFuzzer target: the trace reader (ParseTrace) on arbitrary bytes. It must either return a
// trace that passes Trace::IsValid or throw a bft::Error; anything else (a crash, a sanitizer
// report, another exception type) is a finding.
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
  } catch (const bft::Error&) {
  }
  return 0;
}
