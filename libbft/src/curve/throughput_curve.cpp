#include <algorithm>
#include <cmath>
#include <sstream>

#include "bft/curve.h"

namespace bft::curve {

bool ThroughputCurve::Check(const std::vector<int>& nodes, const std::vector<double>& values,
                            std::string* error) {
  auto fail = [error](const std::string& why) {
    if (error != nullptr) *error = why;
    return false;
  };
  if (nodes.size() != values.size()) {
    std::ostringstream os;
    os << "curve has " << nodes.size() << " node counts but " << values.size() << " values";
    return fail(os.str());
  }
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    std::ostringstream os;
    if (nodes[k] < 0) {
      os << "curve breakpoint " << k << ": node count " << nodes[k] << " is negative";
      return fail(os.str());
    }
    if (k > 0 && nodes[k] <= nodes[k - 1]) {
      os << "curve breakpoint " << k << ": node counts must be strictly increasing (" << nodes[k - 1]
         << " then " << nodes[k] << ")";
      return fail(os.str());
    }
    if (!std::isfinite(values[k]) || values[k] < 0.0) {
      os << "curve breakpoint " << k << " (" << nodes[k] << " nodes): value " << values[k]
         << " is not a finite non-negative number";
      return fail(os.str());
    }
  }
  return true;
}

ThroughputCurve::ThroughputCurve(std::vector<int> nodes, std::vector<double> values) {
  std::string error;
  if (!Check(nodes, values, &error)) throw InvalidArgument(error);
  nodes_ = std::move(nodes);
  values_ = std::move(values);
}

double ThroughputCurve::Evaluate(double n) const {
  if (nodes_.empty() || !(n > 0.0)) return (nodes_.empty() || nodes_.front() != 0) ? 0.0 : values_.front();
  if (n >= nodes_.back()) return values_.back();
  if (n <= nodes_.front()) return values_.front() * n / nodes_.front();  // front > 0 here
  const auto hi = std::upper_bound(nodes_.begin(), nodes_.end(), n) - nodes_.begin();
  const double x0 = nodes_[hi - 1], x1 = nodes_[hi];
  const double t = (n - x0) / (x1 - x0);
  return values_[hi - 1] + t * (values_[hi] - values_[hi - 1]);
}

ThroughputCurve ThroughputCurve::Resample(const std::vector<int>& at) const {
  std::vector<double> values(at.size());
  for (std::size_t k = 0; k < at.size(); ++k) values[k] = Evaluate(at[k]);
  return ThroughputCurve(at, std::move(values));
}

std::vector<double> ThroughputCurve::Table(int max_nodes) const {
  if (max_nodes < 0)
    throw InvalidArgument("curve table: max_nodes " + std::to_string(max_nodes) + " is negative");
  std::vector<double> table(static_cast<std::size_t>(max_nodes) + 1);
  for (int n = 0; n <= max_nodes; ++n) table[n] = Evaluate(n);
  return table;
}

}  // namespace bft::curve
