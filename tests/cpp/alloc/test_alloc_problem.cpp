// Problem and SolveOptions validation: every invalid input is named in the error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "alloc_test_util.h"
#include "bft/alloc.h"

namespace bft::alloc {
namespace {

using testing::MakeJob;

Problem ValidProblem() {
  Problem p;
  p.jobs.push_back(MakeJob("a", 1, 4, {1, 4}, {10, 30}, 10, 5));
  p.jobs.push_back(MakeJob("b", 2, 8, {2, 8}, {5, 20}));
  p.pool = {10, 11, 12, 13};
  p.current = {{10, "a"}, {11, "b"}};
  return p;
}

// Expects IsValid to fail with a message containing every one of `words`, and Solve to throw
// InvalidArgument with the same message.
void ExpectInvalid(const Problem& p, const std::vector<std::string>& words) {
  std::string error;
  EXPECT_FALSE(p.IsValid(&error));
  for (const std::string& w : words)
    EXPECT_NE(error.find(w), std::string::npos) << "'" << w << "' not in: " << error;
  try {
    Solve(p);
    ADD_FAILURE() << "Solve accepted an invalid problem";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(error), std::string::npos) << e.what();
  }
}

TEST(AllocProblem, ValidProblemPasses) {
  std::string error;
  EXPECT_TRUE(ValidProblem().IsValid(&error)) << error;
  EXPECT_TRUE(ValidProblem().IsValid(nullptr));
}

TEST(AllocProblem, RejectsBadTfwd) {
  for (double t : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Problem p = ValidProblem();
    p.tfwd_s = t;
    ExpectInvalid(p, {"tfwd_s"});
  }
}

TEST(AllocProblem, RejectsMinAboveMax) {
  Problem p = ValidProblem();
  p.jobs[1].min_nodes = 9;
  ExpectInvalid(p, {"'b'", "min_nodes 9 > max_nodes 8"});
}

TEST(AllocProblem, RejectsMinBelowOne) {
  Problem p = ValidProblem();
  p.jobs[0].min_nodes = 0;
  ExpectInvalid(p, {"'a'", "min_nodes"});
}

TEST(AllocProblem, RejectsNegativeOrNanCosts) {
  Problem p = ValidProblem();
  p.jobs[0].scale_up_s = -1;
  ExpectInvalid(p, {"'a'", "scale_up_s"});
  p = ValidProblem();
  p.jobs[1].scale_down_s = std::nan("");
  ExpectInvalid(p, {"'b'", "scale_down_s"});
  p = ValidProblem();
  p.jobs[0].restart_s = -2;
  ExpectInvalid(p, {"'a'", "restart_s"});
  p = ValidProblem();
  p.jobs[1].weight = -0.5;
  ExpectInvalid(p, {"'b'", "weight"});
}

TEST(AllocProblem, RejectsValuesWhoseProductsOverflowTheObjective) {
  // tfwd 1e308 used to give a non-optimal allocation flagged proven optimal; scale costs times a
  // huge value overflow the penalties the same way.
  Problem p = ValidProblem();
  p.tfwd_s = 1e308;
  ExpectInvalid(p, {"'a'", "tfwd_s 1e+308", "exceeds 1e+15"});
  p = ValidProblem();
  p.jobs[1].scale_down_s = 1e200;
  ExpectInvalid(p, {"'b'", "scale_down_s 1e+200"});
  p = ValidProblem();
  p.jobs[1].restart_s = 1e200;
  ExpectInvalid(p, {"'b'", "scale_down_s + restart_s 1e+200"});
  p = ValidProblem();
  p.jobs[0].weight = 1e300;
  ExpectInvalid(p, {"'a'", "weight 1e+300"});
}

TEST(AllocProblem, RejectsEmptyAndDuplicateJobIds) {
  Problem p = ValidProblem();
  p.jobs[1].id = "";
  ExpectInvalid(p, {"job 1", "id is empty"});
  p = ValidProblem();
  p.jobs[1].id = "a";
  p.current.clear();
  ExpectInvalid(p, {"'a'", "duplicate job id"});
}

TEST(AllocProblem, RejectsEmptyObjective) {
  Problem p = ValidProblem();
  p.jobs[0].objective = curve::ThroughputCurve();
  ExpectInvalid(p, {"'a'", "objective curve is empty"});
}

TEST(AllocProblem, BadBreakpointsAreRejectedWhenBuilt) {
  EXPECT_THROW(curve::ThroughputCurve({1, 1}, {1.0, 2.0}), InvalidArgument);
  EXPECT_THROW(curve::ThroughputCurve({1, 2}, {1.0, -2.0}), InvalidArgument);
  EXPECT_THROW(curve::ThroughputCurve({1, 2}, {1.0, std::nan("")}), InvalidArgument);
}

TEST(AllocProblem, RejectsNodeTwiceInPool) {
  Problem p = ValidProblem();
  p.pool.push_back(12);
  ExpectInvalid(p, {"node 12", "twice in the pool"});
}

TEST(AllocProblem, RejectsMappedNodeOutsidePool) {
  Problem p = ValidProblem();
  p.current.push_back({99, "a"});
  ExpectInvalid(p, {"node 99", "not in the pool"});
}

TEST(AllocProblem, RejectsNodeMappedTwice) {
  Problem p = ValidProblem();
  p.current.push_back({10, "b"});
  ExpectInvalid(p, {"node 10", "mapped twice"});
}

TEST(AllocProblem, RejectsUnknownJobInMap) {
  Problem p = ValidProblem();
  p.current.push_back({12, "zzz"});
  ExpectInvalid(p, {"node 12", "'zzz'", "unknown job"});
}

TEST(AllocOptions, RejectsInvalidSolverOptionsAndEmptyBackend) {
  SolveOptions options;
  options.solver = "count_milp";
  options.milp_backend = "";
  std::string error;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_NE(error.find("milp_backend"), std::string::npos) << error;
  EXPECT_THROW(Solve(ValidProblem(), options), InvalidArgument);
  options = SolveOptions();
  options.milp.relative_gap = -1.0;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_NE(error.find("milp options"), std::string::npos) << error;
}

TEST(AllocExact, AProblemWhoseTableWouldPassTheCapIsRefusedNamingItsSize) {
  // 1,500 jobs that each want 100 of 100,000 nodes: a table of 1.1 GiB (1e5 x 1e5 was std::bad_alloc).
  Problem p;
  for (int k = 0; k < 1500; ++k)
    p.jobs.push_back(MakeJob("j" + std::to_string(k), 1, 100, {1, 100}, {1, 100}));
  for (NodeId n = 0; n < 100000; ++n) p.pool.push_back(n);
  try {
    Solve(p, SolveOptions{});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("exact: 1500 jobs on 100000 nodes need a table of ", 0), 0u)
        << e.what();
  }
}

TEST(AllocOptions, UnknownBackendIsNotAvailable) {
  SolveOptions options;
  options.solver = "count_milp";
  options.milp_backend = "no-such-backend";
  EXPECT_THROW(Solve(ValidProblem(), options), NotAvailable);
}

TEST(AllocOptions, PoliciesAreFoundByNameAndAnUnknownNameIsRefused) {
  for (const PolicyInfo& policy : Policies()) EXPECT_EQ(FindPolicy(policy.name).name, policy.name);
  EXPECT_EQ(Policies().front().name, "exact");
  try {
    FindPolicy("simplex");
    ADD_FAILURE() << "accepted an unknown solver name";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("simplex"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("solver"), std::string::npos);
  }
  SolveOptions options;
  options.solver = "simplex";
  std::string error;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_NE(error.find("expected one of exact"), std::string::npos) << error;
}

TEST(AllocOptions, PoliciesDeclareTheInputsTheyRead) {
  EXPECT_TRUE(FindPolicy("completion_aware").Needs(PolicyInput::kRemainingSamples));
  EXPECT_TRUE(FindPolicy("lifetime_aware").Needs(PolicyInput::kExpectedIdleS));
  EXPECT_TRUE(FindPolicy("exact").inputs.empty());
  EXPECT_STREQ(ToString(PolicyInput::kExpectedIdleS), "expected_idle_s");
  EXPECT_STREQ(ToString(PolicyInput::kRemainingSamples), "remaining_samples");
}

// Schedulers name their nodes: the names map to ids in order of first appearance and back.
TEST(AllocNodeNames, InternFindAndNameRoundTrip) {
  NodeNames names;
  EXPECT_EQ(names.Intern("c05n06"), 0);
  EXPECT_EQ(names.Intern("a01n01"), 1);
  EXPECT_EQ(names.Intern("c05n06"), 0);  // the same name, the same id
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(names.Find("a01n01"), 1);
  EXPECT_EQ(names.Find("nope"), -1);
  EXPECT_EQ(names.Name(0), "c05n06");
  EXPECT_THROW(names.Name(2), InvalidArgument);
  EXPECT_THROW(names.Name(-1), InvalidArgument);
  EXPECT_THROW(names.Intern(""), InvalidArgument);
  EXPECT_THROW(names.Intern(std::string("c05\0n06", 7)), InvalidArgument);
  EXPECT_EQ(names.size(), 2u);  // refused names are not added
}

// A scheduler with named nodes builds its Problem through NodeNames and names the result back;
// free nodes go out in the order the names were interned, not in the names' order.
TEST(AllocNodeNames, NamedNodesAreAllocatedInInternedOrder) {
  NodeNames names;
  Problem p;
  p.jobs.push_back(MakeJob("a", 1, 1, {1, 4}, {10, 30}));
  p.jobs.push_back(MakeJob("b", 2, 2, {2, 8}, {5, 20}));
  for (const char* node : {"h3", "h1", "h2", "h0"}) p.pool.push_back(names.Intern(node));
  p.current = {{names.Find("h1"), "a"}};
  const Allocation a = Solve(p);
  std::map<std::string, std::string> named;
  for (const Assignment& x : a.map) named[names.Name(x.node)] = x.job;
  const std::map<std::string, std::string> expected = {{"h1", "a"}, {"h2", "b"}, {"h3", "b"}};
  EXPECT_EQ(named, expected);
}

}  // namespace
}  // namespace bft::alloc
