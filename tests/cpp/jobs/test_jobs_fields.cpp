// bft::jobs::JobFromFields: the one validator of a job, for a workload line and for the allocator.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "bft/jobs.h"

namespace bft::jobs {
namespace {

Value Number(double x) {
  Value v;
  v.number = x;
  return v;
}

Value String(std::string s) {
  Value v;
  v.kind = Value::Kind::kString;
  v.text = std::move(s);
  return v;
}

Value Numbers(std::vector<double> xs) {
  Value v;
  v.kind = Value::Kind::kNumberArray;
  v.array = std::move(xs);
  return v;
}

// The fields the allocator needs, without the replay-only submit and work.
std::vector<Field> AllocationFields() {
  return {{"name", String("a")},
          {"min_nodes", Number(1)},
          {"max_nodes", Number(4)},
          {"scale_up_s", Number(5)},
          {"scale_down_s", Number(1)},
          {"nodes", Numbers({1, 4})},
          {"throughput", Numbers({10, 40})}};
}

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JobFromFields, AJobForTheAllocatorNeedsNoSubmitOrWork) {
  const JobSpec spec = JobFromFields(AllocationFields(), Use::kAllocation);
  EXPECT_EQ(spec.name, "a");
  EXPECT_EQ(spec.max_nodes, 4);
  EXPECT_EQ(spec.throughput.Evaluate(2), 20.0);
  EXPECT_EQ(spec.objective.values(), spec.throughput.values());
  EXPECT_EQ(ErrorOf([] { JobFromFields(AllocationFields(), Use::kWorkload); }),
            "job \"a\": missing field \"submit\"");
}

TEST(JobFromFields, ReplayOnlyFieldsAreStillTypeCheckedForTheAllocator) {
  std::vector<Field> fields = AllocationFields();
  fields.push_back({"work", String("lots")});
  EXPECT_EQ(ErrorOf([&] { JobFromFields(fields, Use::kAllocation); }),
            "job \"a\": \"work\": expected a number, found \"lots\"");
}

TEST(JobFromFields, ValuesOfNoJsonKindAreNamedByTheirDescription) {
  std::vector<Field> fields = AllocationFields();
  Value flag;
  flag.kind = Value::Kind::kOther;
  flag.text = "True";
  fields[2].value = flag;  // max_nodes
  EXPECT_EQ(ErrorOf([&] { JobFromFields(fields, Use::kAllocation); }),
            "job \"a\": \"max_nodes\": expected a number, found True");
}

TEST(JobFromFields, UnknownFieldsListTheTable) {
  std::vector<Field> fields = AllocationFields();
  fields.push_back({"sacle_up_s", Number(1)});
  const std::string error = ErrorOf([&] { JobFromFields(fields, Use::kAllocation); });
  std::string known;
  for (const JobField& f : JobFields()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  EXPECT_EQ(error, "unknown field \"sacle_up_s\" (known: " + known + ")");
}

TEST(JobFromFields, ARestartCostIsOptionalAndChecked) {
  EXPECT_EQ(JobFromFields(AllocationFields(), Use::kAllocation).restart_s, 0.0);
  std::vector<Field> fields = AllocationFields();
  fields.push_back({"restart_s", Number(12.5)});
  EXPECT_EQ(JobFromFields(fields, Use::kAllocation).restart_s, 12.5);
  fields.back().value = Number(-1);
  EXPECT_EQ(ErrorOf([&] { JobFromFields(fields, Use::kAllocation); }),
            "job \"a\": restart_s must be finite and >= 0");
}

TEST(JobFromFields, RulesOfTheSpecApplyToBothUses) {
  std::vector<Field> fields = AllocationFields();
  fields[1].value = Number(0);  // min_nodes
  EXPECT_EQ(ErrorOf([&] { JobFromFields(fields, Use::kAllocation); }), "job \"a\": min_nodes must be >= 1");
  fields = AllocationFields();
  fields[6].value = Numbers({1e13, 2e13});  // throughput
  EXPECT_EQ(ErrorOf([&] { JobFromFields(fields, Use::kAllocation); }),
            "job \"a\": throughput: 1e+13 samples/s exceeds 1e+12");
}

}  // namespace
}  // namespace bft::jobs
