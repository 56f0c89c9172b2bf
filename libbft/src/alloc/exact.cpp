// The exact combinatorial solver: a multiple-choice knapsack over node counts, solved by dynamic
// programming over a reduced set of candidate counts with an exact one-job correction.
//
// Nodes are interchangeable once counts are chosen (any counts with sum <= |pool| can be realised
// without migration), so the problem is: maximise sum_j f_j(n_j) subject to sum_j n_j <= N and
// n_j in A_j (the allowed counts: 0 or [min, max], possibly cut further by the max-min goal), where
// f_j(n) = w_j (tfwd O_j(n) - penalty_j(n)). docs/alloc.md gives the full argument; in short:
//
// 1. Dominance: only counts n whose f_j(n) beats every smaller allowed count matter (the
//    "choices"): any other count can be replaced by a smaller one worth at least as much.
// 2. Exchange: call a choice n of job j "inner" if n-1 and n+1 are choices too and f_j is linear on
//    [n-1, n+1] (no curve breakpoint at n, n not within 1 of c_j, n > 1); every other choice is a
//    "key". If two jobs sit on inner choices with slopes s and t, moving one node from one to the
//    other changes the objective by s - t or t - s, so one direction loses nothing; repeat until
//    one job reaches a key. Hence an optimum exists with at most one job on an inner choice.
// 3. DP over keys: D0[i][x] = best value of the first i jobs, all on keys, using <= x nodes. Its
//    value at N is a lower bound LB. For job j on inner n, the others (all on keys) are worth at most
//    D0[J][N - n + k] - f_j(k) for every key k of j (the others plus j at k is a key solution with
//    N - n + k nodes), so j can beat LB only if min_k (f_j(n) - f_j(k) + D0[J][N - n + k]) > LB.
//    Inner counts that pass this test are kept; the jobs with any ("candidates") are moved to the
//    end of the order and a second layer D1 (exactly one candidate on a kept inner count) is run
//    over them. The answer is max(D0[J][N], D1[J][N]), proven optimal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "alloc/internal.h"

namespace bft::alloc::internal {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// The most memory the dynamic program's table may take: (jobs + 1) rows of about a pool's width of
// doubles. 1,000 jobs on Summit's 4,734 nodes need 38 MB; 1e5 jobs on 1e5 nodes would need 80 GB and
// end in std::bad_alloc: such a problem is refused in one line instead.
constexpr std::uint64_t kMaxTableBytes = 1ULL << 30;

struct JobChoices {
  std::vector<int> key_n;
  std::vector<double> key_f;
  std::vector<int> inner_n;
  std::vector<double> inner_f;
  int last = 0;  // the largest choice: the smallest count reaching the job's best value
};

JobChoices MakeChoices(const JobData& d, const std::vector<char>& allowed, double tfwd_s) {
  const int top = static_cast<int>(allowed.size()) - 1;
  std::vector<char> choice(allowed.size(), 0);
  std::vector<double> f(allowed.size(), 0.0);
  bool any = false;
  double best = 0.0;
  for (int n = 0; n <= top; ++n) {
    if (!allowed[n]) continue;
    f[n] = Contribution(d, n, tfwd_s);
    if (!any || f[n] > best) {
      choice[n] = 1;
      best = f[n];
      any = true;
    }
  }
  std::vector<char> kink(allowed.size(), 0);
  for (int b : LinearityBreaks(d, /*around_current=*/true))
    if (b <= top) kink[b] = 1;
  JobChoices out;
  for (int n = 0; n <= top; ++n) {
    if (!choice[n]) continue;
    out.last = n;
    const bool key = n <= 1 || n == top || !choice[n - 1] || !choice[n + 1] || kink[n];
    if (key) {
      out.key_n.push_back(n);
      out.key_f.push_back(f[n]);
    } else {
      out.inner_n.push_back(n);
      out.inner_f.push_back(f[n]);
    }
  }
  return out;
}

// The inner loop of the DP, vectorised: out[x] = max(out[x], max_i in[x - k_i] + f_i) for x in
// [0, width). Blocked over x so that a block of `out` and its window of `in` stay in L1 while every
// choice is applied. On x86-64 with GCC an AVX2 clone is picked at run time where the CPU has it.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(BFT_NO_TARGET_CLONES)
#define BFT_ALLOC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BFT_ALLOC_CLONES
#endif
BFT_ALLOC_CLONES
void RelaxAll(const double* __restrict in, double* __restrict out, int width, const int* ks, const double* fs,
              int count) {
  constexpr int kBlock = 512;
  for (int x0 = 0; x0 < width; x0 += kBlock) {
    const int x1 = std::min(width, x0 + kBlock);
    for (int i = 0; i < count; ++i) {
      const double fk = fs[i];
      const double* src = in - ks[i];
      for (int x = std::max(x0, ks[i]); x < x1; ++x) {
        const double v = src[x] + fk;
        out[x] = out[x] < v ? v : out[x];
      }
    }
  }
}

// out = max over keys (k, f): in[x - k] + f.
void Layer(const double* in, double* out, int width, const JobChoices& c) {
  std::fill(out, out + width, kNegInf);
  RelaxAll(in, out, width, c.key_n.data(), c.key_f.data(), static_cast<int>(c.key_n.size()));
}

// Traceback step: the first choice n (with value f) of the list, n <= x, for which the previous DP
// row explains `target` at x (prev[x - n] + f == target exactly, as the DP computed it); -1 if none.
int TraceChoice(const std::vector<int>& ns, const std::vector<double>& fs, const double* prev, int x,
                double target) {
  for (std::size_t k = 0; k < ns.size() && ns[k] <= x; ++k)
    if (prev[x - ns[k]] + fs[k] == target) return ns[k];
  return -1;
}

// A (rows x width) table of doubles, uninitialised (every cell is written before it is read).
class Table {
 public:
  Table(std::size_t rows, std::size_t width) : width_(width), data_(new double[rows * width]) {}
  double* row(std::size_t i) { return data_.get() + i * width_; }

 private:
  std::size_t width_;
  std::unique_ptr<double[]> data_;
};

}  // namespace

std::vector<char> AllowedCounts(const JobData& d, Goal goal, double tau) {
  const int top = std::max(d.max_nodes, 0);
  std::vector<char> allowed(static_cast<std::size_t>(top) + 1, 0);
  for (int n = 0; n <= top; ++n) {
    allowed[n] = Feasible(d, n);
    if (allowed[n] && goal == Goal::kMaxMinFair) allowed[n] = MeetsThreshold(NormalizedValue(d, n), tau);
  }
  return allowed;
}

double MaxMinThreshold(const Prepared& prepared) {
  const int num_jobs = static_cast<int>(prepared.jobs.size());
  std::vector<std::vector<double>> ratio(num_jobs);
  std::vector<double> candidates;
  for (int j = 0; j < num_jobs; ++j) {
    const JobData& d = prepared.jobs[j];
    ratio[j].assign(static_cast<std::size_t>(std::max(d.max_nodes, 0)) + 1, -1.0);
    for (int n = 0; n <= d.max_nodes; ++n) {
      if (!Feasible(d, n)) continue;
      ratio[j][n] = NormalizedValue(d, n);
      candidates.push_back(ratio[j][n]);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  auto feasible = [&](double tau) {
    long long need = 0;
    for (int j = 0; j < num_jobs; ++j) {
      int n = 0;
      const int size = static_cast<int>(ratio[j].size());
      while (n < size && !MeetsThreshold(ratio[j][n], tau)) ++n;
      if (n == size) return false;
      need += n;
      if (need > prepared.pool_size) return false;
    }
    return true;
  };
  // Largest feasible candidate (feasibility is monotone in tau); tau = 0 is always feasible.
  double best = 0.0;
  std::size_t lo = 0, hi = candidates.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (feasible(candidates[mid])) {
      best = std::max(best, candidates[mid]);
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return best;
}

std::vector<int> ExactCounts(const Prepared& prepared, Goal goal) {
  const int num_jobs = static_cast<int>(prepared.jobs.size());
  const int capacity = prepared.pool_size;
  const double tau = goal == Goal::kMaxMinFair ? MaxMinThreshold(prepared) : 0.0;
  std::vector<JobChoices> choices(num_jobs);
  long long sum_last = 0;
  int widest = 0;
  for (int j = 0; j < num_jobs; ++j) {
    const JobData& d = prepared.jobs[j];
    choices[j] = MakeChoices(d, AllowedCounts(d, goal, tau), prepared.tfwd_s);
    sum_last += choices[j].last;
    widest = std::max(widest, choices[j].last);
  }
  std::vector<int> counts(num_jobs);
  // Every job can have its best count at once.
  if (sum_last <= capacity) {
    for (int j = 0; j < num_jobs; ++j) counts[j] = choices[j].last;
    return counts;
  }
  // The D0 table runs a little beyond the capacity so that the candidate test can use keys above an
  // inner count (N - n + k > N). Any extension is correct; a wider one prunes more.
  const int extension = std::min(widest, 256);
  const int width = capacity + extension + 1;

  const std::uint64_t table_bytes =
      (static_cast<std::uint64_t>(num_jobs) + 1) * static_cast<std::uint64_t>(width) * sizeof(double);
  if (table_bytes > kMaxTableBytes) {
    throw InvalidArgument("exact: " + std::to_string(num_jobs) + " jobs on " + std::to_string(capacity) +
                          " nodes need a table of " + std::to_string(table_bytes >> 20) + " MiB, more than " +
                          std::to_string(kMaxTableBytes >> 20) +
                          " MiB: choose another policy (docs/alloc.md) or fewer jobs");
  }
  std::vector<int> order(num_jobs);
  for (int j = 0; j < num_jobs; ++j) order[j] = j;
  Table d0(static_cast<std::size_t>(num_jobs) + 1, width);
  std::fill(d0.row(0), d0.row(0) + width, 0.0);
  for (int i = 0; i < num_jobs; ++i) Layer(d0.row(i), d0.row(i + 1), width, choices[order[i]]);
  const double* final0 = d0.row(num_jobs);
  const double lower = final0[capacity];

  // Candidates for the one job on an inner choice: the inner counts whose bound beats LB. Only those
  // enter the D1 layer; a job with none is not a candidate.
  const double tolerance = 1e-12 * std::max(1.0, std::abs(lower));
  std::vector<char> candidate(num_jobs, 0);
  int num_candidates = 0;
  for (int j = 0; j < num_jobs; ++j) {
    JobChoices& c = choices[j];
    std::size_t kept = 0;
    for (std::size_t a = 0; a < c.inner_n.size(); ++a) {
      const int n = c.inner_n[a];
      double bound = std::numeric_limits<double>::infinity();
      for (std::size_t b = 0; b < c.key_n.size(); ++b) {
        const int x = capacity - n + c.key_n[b];
        if (x >= width) break;
        bound = std::min(bound, c.inner_f[a] - c.key_f[b] + final0[x]);
      }
      if (bound > lower + tolerance) {
        c.inner_n[kept] = n;
        c.inner_f[kept] = c.inner_f[a];
        ++kept;
      }
    }
    c.inner_n.resize(kept);
    c.inner_f.resize(kept);
    candidate[j] = kept > 0;
    num_candidates += candidate[j];
  }

  if (num_candidates == 0) {
    int x = capacity;
    for (int i = num_jobs; i >= 1; --i) {
      const JobChoices& c = choices[order[i - 1]];
      const int pick = TraceChoice(c.key_n, c.key_f, d0.row(i - 1), x, d0.row(i)[x]);
      if (pick < 0) throw Error("alloc exact: internal error while tracing back the optimum");
      counts[order[i - 1]] = pick;
      x -= pick;
    }
    return counts;
  }

  // Second pass: candidates last. The rows up to the first candidate are unchanged.
  int first = 0;
  while (!candidate[first]) ++first;
  order.clear();
  for (int j = 0; j < num_jobs; ++j)
    if (!candidate[j]) order.push_back(j);
  const int plain = static_cast<int>(order.size());
  for (int j = 0; j < num_jobs; ++j)
    if (candidate[j]) order.push_back(j);
  for (int i = first; i < num_jobs; ++i) Layer(d0.row(i), d0.row(i + 1), width, choices[order[i]]);
  // D1 rows plain..num_jobs, over [0, capacity]: exactly one candidate on an inner choice.
  const int width1 = capacity + 1;
  Table d1(static_cast<std::size_t>(num_candidates) + 1, width1);
  std::fill(d1.row(0), d1.row(0) + width1, kNegInf);
  for (int i = plain; i < num_jobs; ++i) {
    const JobChoices& c = choices[order[i]];
    double* out = d1.row(i - plain + 1);
    if (i == plain) {
      std::fill(out, out + width1, kNegInf);
    } else {
      Layer(d1.row(i - plain), out, width1, c);
    }
    RelaxAll(d0.row(i), out, width1, c.inner_n.data(), c.inner_f.data(), static_cast<int>(c.inner_n.size()));
  }
  const double best0 = d0.row(num_jobs)[capacity];
  const double best1 = d1.row(num_candidates)[capacity];
  bool inner_used = best1 > best0;
  int x = capacity;
  for (int i = num_jobs; i >= 1; --i) {
    const JobChoices& c = choices[order[i - 1]];
    int pick = -1;
    if (inner_used) {
      // Row i of D1 is d1.row(i - plain); its predecessors are d1.row(i - plain - 1) and d0.row(i - 1).
      const double target = d1.row(i - plain)[x];
      if (i - 1 > plain) pick = TraceChoice(c.key_n, c.key_f, d1.row(i - 1 - plain), x, target);
      if (pick < 0) {
        pick = TraceChoice(c.inner_n, c.inner_f, d0.row(i - 1), x, target);
        if (pick >= 0) inner_used = false;
      }
    } else {
      pick = TraceChoice(c.key_n, c.key_f, d0.row(i - 1), x, d0.row(i)[x]);
    }
    if (pick < 0) throw Error("alloc exact: internal error while tracing back the optimum");
    counts[order[i - 1]] = pick;
    x -= pick;
  }
  return counts;
}

std::vector<int> EqualShareCounts(const Prepared& prepared, bool share_above_min) {
  const int num_jobs = static_cast<int>(prepared.jobs.size());
  std::vector<int> counts(num_jobs, 0);
  if (num_jobs == 0) return counts;
  const int share = prepared.pool_size / num_jobs;
  int left = prepared.pool_size;
  for (int j = 0; j < num_jobs; ++j) {
    const JobData& d = prepared.jobs[j];
    const int n = std::min(share, d.max_nodes);
    const bool enough = n >= d.min_nodes && (!share_above_min || share > d.min_nodes);
    counts[j] = enough ? n : 0;
    left -= counts[j];
  }
  // Leftover nodes, first come first served: each job in turn grows as far as it can.
  for (int j = 0; j < num_jobs && left > 0; ++j) {
    const JobData& d = prepared.jobs[j];
    if (counts[j] == 0 && (d.min_nodes > left || d.min_nodes > d.max_nodes)) continue;
    const int n = std::min(d.max_nodes, counts[j] + left);
    left -= n - counts[j];
    counts[j] = n;
  }
  return counts;
}

}  // namespace bft::alloc::internal
