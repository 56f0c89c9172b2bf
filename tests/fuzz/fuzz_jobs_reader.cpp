// libFuzzer target: the workload reader (ParseJobs) on arbitrary bytes. It must either return
// jobs that pass JobSpec::IsValid or throw a bft::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bft/jobs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const bft::jobs::JobSpec& job : bft::jobs::ParseJobs(text, "fuzz.jsonl")) {
      std::string error;
      if (!job.IsValid(&error)) std::abort();
    }
  } catch (const bft::Error&) {
  }
  return 0;
}
