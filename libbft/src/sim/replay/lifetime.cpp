// IdleLifetimePredictor: the mean residual life of idle holes, from a log-binned histogram.
#include <algorithm>
#include <cmath>

#include "bft/sim.h"

namespace bft::sim {

IdleLifetimePredictor::IdleLifetimePredictor(double prior_s, int min_holes)
    : prior_s_(prior_s), min_holes_(min_holes) {
  if (!std::isfinite(prior_s) || !(prior_s >= 1.0))
    throw InvalidArgument("prior_s must be a finite number >= 1");
  if (min_holes < 0) throw InvalidArgument("min_holes must be >= 0");
}

int IdleLifetimePredictor::Bin(double seconds) {
  const double b = std::floor(kBinsPerDecade * std::log10(std::max(seconds, 1.0)));
  return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kBins - 1)));
}

void IdleLifetimePredictor::ObserveHole(double length_s) {
  if (!std::isfinite(length_s) || length_s < 0.0) return;  // not a hole
  const int b = Bin(length_s);
  count_[b] += 1.0;
  sum_[b] += length_s;
  ++holes_;
  stale_ = true;
}

double IdleLifetimePredictor::ExpectedRemaining(double age_s) {
  if (holes_ < min_holes_) return prior_s_;
  if (stale_) {
    for (int b = kBins - 1; b >= 0; --b) {
      count_from_[b] = count_from_[b + 1] + count_[b];
      sum_from_[b] = sum_from_[b + 1] + sum_[b];
    }
    stale_ = false;
  }
  const double age = std::max(age_s, 0.0);
  const int b = Bin(age);
  // Holes in the bins above the age's, and those of its own bin whose mean exceeds the age.
  double count = count_from_[b + 1];
  double sum = sum_from_[b + 1];
  if (count_[b] > 0.0 && sum_[b] > age * count_[b]) {
    count += count_[b];
    sum += sum_[b];
  }
  if (count <= 0.0) return std::max(age, 1.0);
  return std::max(sum / count - age, 1.0);
}

}  // namespace bft::sim
