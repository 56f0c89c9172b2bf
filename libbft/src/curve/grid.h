// Sparse breakpoints for the curves handed to the allocator (FitResult::ToCurve and the profiling
// advisor's curves): their count grows with log(max_nodes), not with max_nodes, so neither the
// memory of a curve nor the allocator's work (which grows with the number of breakpoints) depends
// on the size of the pool. See docs/curve.md ("Curves for the allocator").
#pragma once

#include <algorithm>
#include <vector>

namespace bft::curve::internal {

// 0, then 1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and three times powers of two: two
// breakpoints per doubling) up to max_nodes, max_nodes itself, and every value of `extra` in
// [1, max_nodes]; sorted and unique. max_nodes >= 1.
inline std::vector<int> SparseGrid(int max_nodes, const std::vector<long long>& extra) {
  std::vector<int> grid = {0};
  for (long long p = 1; p <= max_nodes; p *= 2) {
    grid.push_back(static_cast<int>(p));
    if (3 * p / 2 > p && 3 * p / 2 <= max_nodes) grid.push_back(static_cast<int>(3 * p / 2));
  }
  grid.push_back(max_nodes);
  for (long long e : extra)
    if (e >= 1 && e <= max_nodes) grid.push_back(static_cast<int>(e));
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  return grid;
}

}  // namespace bft::curve::internal
