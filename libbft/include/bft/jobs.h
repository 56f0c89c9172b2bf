// bft::jobs — the job format: what an elastic training job is (its node bounds, curves, rescale
// costs and configurations), the one table of its fields, the one validator, and the reader and
// writer of workload files (JSONL, docs/formats.md). It sits beneath both the allocator (bft::alloc
// reads its jobs through it: bft.allocate's job dicts) and the replay (bft::sim reads workloads).
#pragma once

#include <string>
#include <vector>

#include "bft/curve.h"
#include "bft/error.h"

namespace bft::jobs {

// Another way to run a job, with its own curves: JigSaw's structured partial backpropagation, where
// some workers back-propagate through the last layers only (docs/spb.md). The job's value at n
// nodes in this configuration is efficiency x objective(n).
struct Configuration {
  std::string name;                   // non-empty, unique within the job, not "full"
  curve::ThroughputCurve objective;   // must not be empty
  curve::ThroughputCurve throughput;  // samples/s; empty: the objective
  // What one sample processed in this configuration is worth against one with full
  // backpropagation (its statistical efficiency), in (0, 1].
  double efficiency = 1.0;
  // True if the name, curves and efficiency are as above; else false with the reason in *error.
  bool IsValid(std::string* error) const;
};

// One field of a job line of the workload format (docs/formats.md). JobFields() is the one table
// of them: the workload reader and JobFromFields look fields up in it and list it in their
// "unknown field" message.
struct JobField {
  const char* name;
  bool required;        // in a workload line
  bool for_allocation;  // read by the allocator (bft.allocate); the others are replay-only
};
const std::vector<JobField>& JobFields();
// The fields of one element of a job's "configurations" array (docs/formats.md): name, efficiency,
// nodes (default: the job's), throughput, objective (default: throughput).
const std::vector<JobField>& ConfigurationFields();

// The largest throughput or objective value a job may have (JobSpec::IsValid): samples/s times
// the seconds of any trace stay finite.
inline constexpr double kMaxSamplesPerS = 1e12;

// One elastic training job of a workload (one line of a jobs JSONL file).
struct JobSpec {
  std::string name;
  double submit_s = 0.0;  // on the trace's clock
  int min_nodes = 1;
  int max_nodes = 1;
  double work = 0.0;  // samples to process until the job is complete
  double scale_up_s = 0.0;
  double scale_down_s = 0.0;
  double restart_s = 0.0;  // a stop's cost on top of scale_down_s: the later cold start (alloc::Job;
                           // the replay charges it when the job runs again, at that rate)
  curve::ThroughputCurve throughput;  // true samples/s: drives the simulated progress
  curve::ThroughputCurve objective;   // what the allocator maximises (oracle mode)
  double weight = 1.0;
  // Other ways to run the job (structured partial backpropagation, docs/spb.md), each with its own
  // curves (throughput always set) and efficiency. `work` counts samples at full backpropagation: a
  // sample processed in configuration c counts efficiency(c) of one.
  std::vector<Configuration> configurations;

  bool IsValid(std::string* error) const;
};

// A job object as fields: what the workload reader parses from a JSON line, or what a binding
// builds from its own language's objects (bft.allocate's dicts), so that both go through one
// validator (JobFromFields).
struct Field;
struct Value {
  // An empty array is kNumberArray: `[]` holds neither numbers nor objects. kOther is anything else
  // a binding was given (a boolean, a mixed list...), described in `text` for messages.
  enum class Kind { kString, kNumber, kNumberArray, kObjectArray, kOther };
  Kind kind = Kind::kNumber;
  std::string text;                         // kString: the string; kOther: what the value is
  double number = 0.0;                      // kNumber
  std::vector<double> array;                // kNumberArray
  std::vector<std::vector<Field>> objects;  // kObjectArray: each object's fields in order
};
struct Field {
  std::string key;
  Value value;
};

// What the fields are read for: a workload line (every required field, JobSpec::IsValid) or a job
// of bft.allocate (the fields the allocator reads; submit and work may be absent and go unchecked
// but for their type).
enum class Use { kWorkload, kAllocation };

// The job the fields describe. Throws InvalidArgument naming the job and the field, such as
// `job "a": "min_nodes": expected a whole number, found 1.5` or `unknown field "color" (known: ...)`.
JobSpec JobFromFields(const std::vector<Field>& fields, Use use);

// Reads a JSONL workload (one flat JSON object per line, blank lines skipped; docs/formats.md),
// plain or gzip. Throws FileNotFound, or ParseError naming the file, line and field of anything bad
// (unknown fields and duplicate job names included).
std::vector<JobSpec> ReadJobs(const std::string& path);
// The same from text in memory; `source` names it in error messages.
std::vector<JobSpec> ParseJobs(const std::string& text, const std::string& source = "<jobs>");
// Writes the format ReadJobs reads (gzip if the path ends in ".gz"). Throws InvalidArgument for an
// invalid job (JobSpec::IsValid).
void WriteJobs(const std::vector<JobSpec>& jobs, const std::string& path);

}  // namespace bft::jobs
