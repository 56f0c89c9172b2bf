// bft::curve — throughput curves: samples/s (or any value) as a function of the node count.
#pragma once

#include <string>
#include <vector>

#include "bft/error.h"

namespace bft::curve {

// A piecewise-linear curve through (nodes[k], values[k]).
// - nodes: non-negative, strictly increasing integers; values: finite and non-negative.
// - Below nodes.front() the curve runs linearly from (0, 0): a job on no nodes does nothing.
// - Above nodes.back() the curve stays flat at values.back(): no gain is assumed where nothing
//   was measured (the conservative extrapolation).
class ThroughputCurve {
 public:
  ThroughputCurve() = default;  // the zero curve (no breakpoints)
  // Throws bft::InvalidArgument naming the offending breakpoint if the points are invalid.
  ThroughputCurve(std::vector<int> nodes, std::vector<double> values);

  // Returns true if (nodes, values) make a valid curve, else false with the reason in *error.
  static bool Check(const std::vector<int>& nodes, const std::vector<double>& values, std::string* error);

  double Evaluate(double n) const;
  double operator()(double n) const { return Evaluate(n); }
  // The same curve sampled at the given node counts (which must themselves be a valid breakpoint set).
  ThroughputCurve Resample(const std::vector<int>& at) const;
  // Values at 0, 1, ..., max_nodes: the table the allocator consumes.
  std::vector<double> Table(int max_nodes) const;

  const std::vector<int>& nodes() const { return nodes_; }
  const std::vector<double>& values() const { return values_; }
  bool empty() const { return nodes_.empty(); }

 private:
  std::vector<int> nodes_;
  std::vector<double> values_;
};

}  // namespace bft::curve
