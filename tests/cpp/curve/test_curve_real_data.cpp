// Fitting the measured ImageNet curves of ../shared/data/jobs-imagenet-throughput-1001.jsonl
// (seven models, 1..64 nodes) from three or fewer sizes. "Unmeasured sizes" are the measured node
// counts (1, 2, 4, ..., 64) not in the training set; "inside" are those below the largest
// training size (interpolation), the rest are extrapolation. See docs/curve.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../shared_data.h"
#include "bft/curve.h"

namespace bft::curve {
namespace {

struct Measured {
  std::string name;
  std::vector<int> nodes;
  std::vector<double> values;
};

std::vector<double> NumberList(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\"");
  if (at == std::string::npos) return {};
  const auto open = line.find('[', at), close = line.find(']', at);
  std::string body = line.substr(open + 1, close - open - 1);
  std::replace(body.begin(), body.end(), ',', ' ');
  std::istringstream in(body);
  std::vector<double> out;
  for (double v; in >> v;) out.push_back(v);
  return out;
}

// The distinct curves (deduplicated by their values), without the (0, 0) point.
std::vector<Measured> LoadCurves(const std::string& path) {
  std::ifstream in(path);
  std::vector<Measured> out;
  std::set<std::vector<double>> seen;
  for (std::string line; std::getline(in, line);) {
    const auto nodes = NumberList(line, "nodes");
    const auto values = NumberList(line, "throughput");
    if (nodes.empty() || nodes.size() != values.size() || !seen.insert(values).second) continue;
    Measured m;
    const auto name_at = line.find("\"name\": \"") + 9;
    m.name = line.substr(name_at, line.find('"', name_at) - name_at);
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      if (nodes[k] <= 0) continue;
      m.nodes.push_back(static_cast<int>(nodes[k]));
      m.values.push_back(values[k]);
    }
    out.push_back(m);
  }
  return out;
}

struct Errors {
  std::vector<double> inside, beyond;
  std::vector<double> all() const {
    std::vector<double> a = inside;
    a.insert(a.end(), beyond.begin(), beyond.end());
    return a;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}
double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

Errors Evaluate(const std::vector<Measured>& curves, const std::vector<int>& train, Model model) {
  Errors e;
  FitOptions opt;
  opt.model = model;
  for (const Measured& m : curves) {
    std::vector<double> n, x;
    for (int t : train) {
      const auto k = std::find(m.nodes.begin(), m.nodes.end(), t) - m.nodes.begin();
      n.push_back(t);
      x.push_back(m.values[k]);
    }
    const FitResult fit = Fit(n, x, {}, opt);
    EXPECT_TRUE(fit.ok()) << m.name << " " << ToString(model) << ": " << fit.message;
    if (!fit.ok()) continue;
    for (std::size_t k = 0; k < m.nodes.size(); ++k) {
      if (std::find(train.begin(), train.end(), m.nodes[k]) != train.end()) continue;
      const double err = std::abs(fit.Predict(m.nodes[k]) / m.values[k] - 1.0);
      (m.nodes[k] < train.back() ? e.inside : e.beyond).push_back(err);
    }
  }
  return e;
}

class CurveRealData : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::SharedDataPath("jobs-imagenet-throughput-1001.jsonl");
    BFT_REQUIRE_SHARED_DATA(path_);
    curves_ = LoadCurves(path_);
  }
  std::string path_;
  std::vector<Measured> curves_;
};

TEST_F(CurveRealData, FileHoldsSevenDistinctCurvesFromOneToSixtyFourNodes) {
  ASSERT_EQ(curves_.size(), 7u);
  for (const Measured& m : curves_) EXPECT_EQ(m.nodes, (std::vector<int>{1, 2, 4, 8, 16, 32, 64})) << m.name;
}

TEST_F(CurveRealData, EveryModelFitsFromEachTrainingSet) {
  for (const auto& train : std::vector<std::vector<int>>{{1, 8, 64}, {1, 4, 16}, {1, 2, 4}})
    for (Model model : kAllModels) Evaluate(curves_, train, model);  // EXPECTs inside
}

TEST_F(CurveRealData, AutoFromOneEightSixtyFourMeetsFiveAndTwentyPercent) {
  const Errors e = Evaluate(curves_, {1, 8, 64}, Model::kAuto);
  ASSERT_EQ(e.inside.size(), 7u * 4u);  // 2, 4, 16, 32 for each curve
  EXPECT_LE(Median(e.inside), 0.05);
  EXPECT_LE(Max(e.inside), 0.20);
}

TEST_F(CurveRealData, AutoFromOneFourSixteenMeetsEightPercent) {
  const Errors e = Evaluate(curves_, {1, 4, 16}, Model::kAuto);
  ASSERT_EQ(e.inside.size(), 7u * 2u);  // 2, 8
  ASSERT_EQ(e.beyond.size(), 7u * 2u);  // 32, 64
  EXPECT_LE(Median(e.inside), 0.08);
  EXPECT_LE(Median(e.all()), 0.08);
}

TEST_F(CurveRealData, AutoBeatsPlainAmdahlInWorstCaseError) {
  for (const auto& train : std::vector<std::vector<int>>{{1, 8, 64}, {1, 4, 16}}) {
    const double autoerr = Max(Evaluate(curves_, train, Model::kAuto).all());
    const double amdahl = Max(Evaluate(curves_, train, Model::kAmdahl).all());
    EXPECT_LT(autoerr, amdahl) << "training sizes from " << train.front() << " to " << train.back();
  }
}

}  // namespace
}  // namespace bft::curve
