// The replay's options: their check, the names of their modes, and the reference window's start.
#include <cmath>
#include <string>

#include "bft/sim.h"

namespace bft::sim {

bool ReplayOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& what) {
    if (error) *error = what;
    return false;
  };
  if (max_jobs < 1) return fail("max_jobs must be >= 1 (got " + std::to_string(max_jobs) + ")");
  if (!std::isfinite(tfwd_s) || tfwd_s <= 0) return fail("tfwd_s must be finite and > 0");
  if (start_s && (!std::isfinite(*start_s) || *start_s < 0)) return fail("start_s must be finite and >= 0");
  if (end_s && !std::isfinite(*end_s)) return fail("end_s must be finite");
  if (start_s && end_s && *end_s < *start_s) return fail("end_s must not be before start_s");
  std::string why;
  if (!solve.IsValid(&why)) return fail("solve: " + why);
  if (!advisor.IsValid(&why)) return fail(why);  // "advisor options: <field> ..."
  if (curves != CurveMode::kOracle && curves != CurveMode::kLearned && curves != CurveMode::kLearnedCurves &&
      curves != CurveMode::kLearnedCosts) {
    return fail("curves is not a known CurveMode");
  }
  if (accounting != Accounting::kContinuous && accounting != Accounting::kReference) {
    return fail("accounting is not a known Accounting");
  }
  if (configurations != ConfigurationMode::kChoose && configurations != ConfigurationMode::kFullOnly) {
    return fail("configurations is not a known ConfigurationMode");
  }
  return true;
}

const char* ToString(ConfigurationMode mode) {
  return mode == ConfigurationMode::kFullOnly ? "full" : "choose";
}

ConfigurationMode ConfigurationModeFromString(const std::string& name) {
  if (name == "choose") return ConfigurationMode::kChoose;
  if (name == "full") return ConfigurationMode::kFullOnly;
  throw InvalidArgument("configurations: unknown mode \"" + name + "\" (expected \"choose\" or \"full\")");
}

const char* ToString(Accounting accounting) {
  return accounting == Accounting::kReference ? "reference" : "continuous";
}

Accounting AccountingFromString(const std::string& name) {
  if (name == "continuous") return Accounting::kContinuous;
  if (name == "reference") return Accounting::kReference;
  throw InvalidArgument("accounting: unknown mode \"" + name +
                        "\" (expected \"continuous\" or \"reference\")");
}

std::optional<std::int64_t> ReferenceStartS(const Trace& trace, int* distinct_times) {
  const std::vector<Transition>& tr = trace.transitions;
  int distinct = 0;
  for (std::size_t k = 0; k < tr.size(); ++k) {
    if (k == 0 || tr[k].time_s != tr[k - 1].time_s) ++distinct;
    if (distinct == kReferenceStartEvent) return tr[k].time_s;
  }
  if (distinct_times != nullptr) *distinct_times = distinct;
  return std::nullopt;
}

}  // namespace bft::sim
