// The two MILP formulations, built with bft::milp and solved by a registered backend.
//
// Count level (one integer n_j per job; nodes are assigned afterwards, see FromCounts):
//   n_j in [0, M_j] integer, r_j binary:   min_j r_j <= n_j <= M_j r_j            (0 or [min, max])
//   y_j = F_j(n_j) piecewise linear (SOS2) through 0, min_j, the curve breakpoints, c_j - 1, c_j,
//         c_j + 1 and M_j, where F_j(n) = w_j (tfwd O_j(n) - penalty_j(n)) at those points
//   sum_j n_j <= N
//   maximise sum_j y_j
// F_j is linear between consecutive breakpoints at integer n (the penalty is constant below c_j,
// at c_j and above c_j), so y_j = F_j(n_j) exactly at every integer n_j: the grow/shrink
// indicators are encoded by the breakpoints around c_j instead of two binaries per job, which
// measured 1.5-2.5x faster on GLPK (docs/alloc.md).
// Node level (the BFTrainer paper): binaries x_jk for job j on pool node k, n_j = sum_k x_jk,
// sum_j x_jk <= 1 for every node, y_j = O_j(n_j), grow/shrink binaries g_j, s_j with
//   n_j <= c_j + (M_j - c_j) g_j,  n_j >= c_j (1 - s_j),  g_j + s_j <= 1,
//   x_jk >= 1 - s_j for the job's current nodes, x_jk <= g_j for every other node (no migration),
//   maximise sum_j w_j (tfwd y_j - up_j g_j - down_j s_j).
// Max-min goal: the fair minimum tau is computed exactly (MaxMinThreshold, the exact solver's
// threshold search), then the weighted objective is maximised over the counts the exact solver
// allows: n_j at least the least count with O_j(n) >= (tau - kFairnessTolerance) O_j(max_nodes), and
// that value bound itself where the curve dips below it above that count.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "alloc/internal.h"

namespace bft::alloc::internal {

namespace {

struct JobVars {
  bool fixed_zero = true;  // the job cannot run (its max is below its min once capped by the pool)
  milp::Var n, r, g, s, y, value;
  bool has_g = false, has_s = false;
};

// Breakpoints of a piecewise-linear function of n over {0} U [min, max] that is linear between
// consecutive ones at integer n: 0, min, the curve breakpoints, max, and (for the folded count-level
// objective) c - 1, c, c + 1 where the rescale penalty jumps. Between 0 and min only the two ends
// are feasible (n = 0 or n >= min is enforced by r).
std::vector<int> Breakpoints(const JobData& d, bool around_current) {
  std::vector<int> xs{0, d.min_nodes, d.max_nodes};
  for (int b : LinearityBreaks(d, around_current))
    if (b > d.min_nodes && b < d.max_nodes) xs.push_back(b);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  return xs;
}

// The max-min goal's restriction, computed exactly before any model is built. The fair minimum tau is
// a count-level quantity: any counts that fit the pool are reachable without migration (FromCounts),
// so the node model's rules do not change it, and MaxMinThreshold (the exact solver's search) finds
// it. A first MILP maximising t did so before, with rows t O_j(max_nodes) whose coefficients spanned
// the curves' range and a t that had to be fixed again within an absolute slack the backends did not
// hold (docs/alloc.md, "Numerical range").
struct FairBounds {
  double tau = 0.0;
  std::vector<int> least;  // per job: the least count the exact solver allows (-1: no restriction)
  // Per job whose curve dips below tau above `least`: the bound on its value that cuts those counts
  // (in the curve's units); 0 for the others.
  std::vector<double> value_floor;
};

FairBounds MaxMinBounds(const Prepared& prepared) {
  FairBounds fair;
  fair.tau = MaxMinThreshold(prepared);
  fair.least.assign(prepared.jobs.size(), -1);
  fair.value_floor.assign(prepared.jobs.size(), 0.0);
  if (fair.tau - kFairnessTolerance <= 0.0) return fair;  // every count meets it
  for (std::size_t j = 0; j < prepared.jobs.size(); ++j) {
    const JobData& d = prepared.jobs[j];
    if (!(d.normalizer > 0.0) || d.max_nodes < d.min_nodes) continue;  // normalised value 1, or tau is 0
    // Above the least allowed count, the values allowed and those cut: the value bound goes halfway
    // between them, as far from both as it can be, not at the threshold, where the binding job's own
    // value sits (CBC called such problems infeasible within its tolerance).
    const std::vector<char> allowed = AllowedCounts(d, Goal::kMaxMinFair, fair.tau);
    double least_allowed = 0.0, most_cut = -1.0;
    for (int n = 0; n < static_cast<int>(allowed.size()); ++n) {
      if (allowed[n] && fair.least[j] < 0) {
        fair.least[j] = n;
        least_allowed = d.value[n];
      } else if (allowed[n]) {
        least_allowed = std::min(least_allowed, d.value[n]);
      } else if (fair.least[j] >= 0 && Feasible(d, n)) {
        most_cut = std::max(most_cut, d.value[n]);
      }
    }
    if (most_cut >= 0.0) fair.value_floor[j] = 0.5 * (most_cut + least_allowed);
  }
  return fair;
}

struct Formulation {
  milp::Model model{"bft_alloc"};
  std::vector<JobVars> vars;
  milp::LinExpr objective;
  std::optional<FairBounds> fair;  // the max-min goal's restriction (with jobs), else none
};

// Variables and constraints every job has in both formulations (n_j is created here as well).
// Objective: with fold_penalty (count level), y_j is the job's whole contribution
// w_j (tfwd O_j(n) - penalty_j(n)) as one piecewise-linear function of n, exact at every integer
// n since it has breakpoints at c - 1, c, c + 1; the grow/shrink indicators then stay out of the
// objective. Without it (node level, as in the paper), y_j = O_j(n_j) and the penalty is charged
// through g_j and s_j. Under the max-min goal it computes f->fair, bounds the counts by it, and adds
// v_j = O_j(n_j) where y_j is not already that and its value is bounded (a curve that dips).
void AddJobs(const Prepared& prepared, const SolveOptions& options, bool fold_penalty, Formulation* f) {
  if (options.goal == Goal::kMaxMinFair && !prepared.jobs.empty()) f->fair = MaxMinBounds(prepared);
  const FairBounds* fair = f->fair ? &*f->fair : nullptr;
  const int num_jobs = static_cast<int>(prepared.jobs.size());
  f->vars.resize(num_jobs);
  for (int j = 0; j < num_jobs; ++j) {
    const JobData& d = prepared.jobs[j];
    JobVars& v = f->vars[j];
    const std::string tag = std::to_string(j);
    if (d.max_nodes < d.min_nodes) {
      f->objective += Contribution(d, 0, prepared.tfwd_s);  // constant: the job stays at 0
      continue;
    }
    v.fixed_zero = false;
    const int top = d.max_nodes;
    // Under max-min the counts below the least allowed one are cut by n_j's bound (and r_j = 1: a
    // count of 0 is worth 0); bounds, not rows, so that no backend tolerance applies to them.
    const int least = fair != nullptr ? fair->least[j] : -1;
    v.n = f->model.AddInteger(std::max(0, least), top, "n_" + tag);
    v.r = least > 0 ? f->model.AddInteger(1, 1, "r_" + tag) : f->model.AddBinary("r_" + tag);
    f->model.AddConstraint(milp::LinExpr(v.n) - d.min_nodes * milp::LinExpr(v.r) >= 0.0, "min_" + tag);
    f->model.AddConstraint(milp::LinExpr(v.n) - top * milp::LinExpr(v.r) <= 0.0, "max_" + tag);
    if (top > d.current && !fold_penalty) {
      v.has_g = true;
      v.g = f->model.AddBinary("g_" + tag);
      f->model.AddConstraint(milp::LinExpr(v.n) - (top - d.current) * milp::LinExpr(v.g) <= d.current,
                             "grow_" + tag);
    }
    if (d.current > 0 && !fold_penalty) {
      v.has_s = true;
      v.s = f->model.AddBinary("s_" + tag);
      f->model.AddConstraint(milp::LinExpr(v.n) + d.current * milp::LinExpr(v.s) >= d.current,
                             "shrink_" + tag);
    }
    const std::vector<int> points = Breakpoints(d, fold_penalty);
    std::vector<double> xs, ys, values;
    for (int x : points) {
      xs.push_back(x);
      values.push_back(d.value[x]);
      ys.push_back(fold_penalty ? Contribution(d, x, prepared.tfwd_s) : d.value[x]);
    }
    v.y = f->model.AddPiecewiseLinear(v.n, xs, ys, (fold_penalty ? "f_" : "O_") + tag);
    v.value = v.y;
    if (fold_penalty && fair != nullptr && fair->value_floor[j] > 0.0)
      v.value = f->model.AddPiecewiseLinear(v.n, xs, values, "O_" + tag);
    if (fold_penalty) {
      f->objective += milp::LinExpr(v.y);
    } else {
      f->objective += (d.weight * prepared.tfwd_s) * milp::LinExpr(v.y);
      if (v.has_g) f->objective -= (d.weight * d.up_penalty) * milp::LinExpr(v.g);
      if (v.has_s) f->objective -= (d.weight * d.down_penalty) * milp::LinExpr(v.s);
      // A stop (n = 0, hence r = 0) pays its restart on top of the shrink: w (stop - down) (1 - r).
      const double restart = d.weight * (d.stop_penalty - d.down_penalty);
      if (v.has_s && restart > 0.0) f->objective += restart * milp::LinExpr(v.r) - restart;
    }
  }
}

// Solves f->model with the goal. Under max-min (f->fair) the weighted objective is maximised
// over the counts the exact solver allows: AddJobs bounded n_j below by its least allowed count, which
// holds exactly whatever the curves' range (a bound on the value variable alone was lost within the
// tolerance of its piecewise rows when the job's own curve spans decades); the value bound itself is
// added only where the curve dips above that count.
milp::Result SolveGoal(const SolveOptions& options, Formulation* f, std::string* note) {
  const std::unique_ptr<milp::Backend> backend = milp::MakeBackend(options.milp_backend);
  if (const std::optional<FairBounds>& fair = f->fair) {
    std::ostringstream os;
    os << "max-min threshold " << fair->tau << " (exact); ";
    *note = os.str();
    for (std::size_t j = 0; j < fair->least.size(); ++j) {
      const JobVars& v = f->vars[j];
      if (fair->value_floor[j] > 0.0 && !v.fixed_zero)
        f->model.AddConstraint(milp::LinExpr(v.value) >= fair->value_floor[j],
                               "fair_value_" + std::to_string(j));
    }
  }
  f->model.Maximize(f->objective);
  return backend->Solve(f->model, options.milp);
}

MilpOutcome Outcome(const milp::Result& result, const std::string& note) {
  MilpOutcome out;
  out.termination = result.termination;
  out.proven_optimal = result.optimal() && result.gap <= kProvenGap;
  std::ostringstream os;
  os << note << result.backend << ": " << milp::ToString(result.termination);
  if (!result.message.empty()) os << " (" << result.message << ")";
  if (result.has_solution) os << ", objective " << result.objective << ", gap " << result.gap;
  out.message = os.str();
  return out;
}

}  // namespace

MilpOutcome CountMilpOutcome(const Prepared& prepared, const SolveOptions& options) {
  Formulation f;
  AddJobs(prepared, options, /*fold_penalty=*/true, &f);
  milp::LinExpr total;
  for (const JobVars& v : f.vars)
    if (!v.fixed_zero) total += milp::LinExpr(v.n);
  f.model.AddConstraint(total <= prepared.pool_size, "pool");
  std::string note;
  const milp::Result result = SolveGoal(options, &f, &note);
  MilpOutcome out = Outcome(result, note);
  if (!result.has_solution) return out;
  out.counts.assign(prepared.jobs.size(), 0);
  for (std::size_t j = 0; j < f.vars.size(); ++j)
    if (!f.vars[j].fixed_zero) out.counts[j] = static_cast<int>(std::lround(result.Value(f.vars[j].n)));
  std::string error;
  if (!CheckCounts(prepared, out.counts, &error)) {
    out.message += "; rejected: " + error;
    return out;
  }
  out.has_solution = true;
  return out;
}

MilpOutcome NodeMilpOutcome(const Problem& problem, const Prepared& prepared, const SolveOptions& options) {
  Formulation f;
  AddJobs(prepared, options, /*fold_penalty=*/false, &f);
  const int pool = prepared.pool_size;
  const int num_jobs = static_cast<int>(prepared.jobs.size());
  std::vector<int> owner(pool, -1);
  {
    std::unordered_map<NodeId, int> where;
    where.reserve(pool);
    for (int k = 0; k < pool; ++k) where.emplace(problem.pool[k], k);
    for (int j = 0; j < num_jobs; ++j)
      for (NodeId n : prepared.jobs[j].current_nodes) owner[where.at(n)] = j;
  }
  std::vector<std::vector<milp::Var>> x(num_jobs);
  std::vector<milp::LinExpr> per_node(pool);
  for (int j = 0; j < num_jobs; ++j) {
    JobVars& v = f.vars[j];
    if (v.fixed_zero) continue;
    const std::string tag = std::to_string(j);
    milp::LinExpr count(v.n);
    x[j].resize(pool);
    for (int k = 0; k < pool; ++k) {
      x[j][k] = f.model.AddBinary("x_" + tag + "_" + std::to_string(k));
      count -= milp::LinExpr(x[j][k]);
      per_node[k] += milp::LinExpr(x[j][k]);
      if (owner[k] == j) {
        // Kept unless the job shrinks.
        milp::LinExpr keep(x[j][k]);
        if (v.has_s) keep += milp::LinExpr(v.s);
        f.model.AddConstraint(keep >= 1.0, "keep_" + tag + "_" + std::to_string(k));
      } else {
        milp::LinExpr take(x[j][k]);
        if (v.has_g) take -= milp::LinExpr(v.g);
        f.model.AddConstraint(take <= 0.0, "take_" + tag + "_" + std::to_string(k));
      }
    }
    f.model.AddConstraint(count == 0.0, "count_" + tag);
    if (v.has_g && v.has_s)
      f.model.AddConstraint(milp::LinExpr(v.g) + milp::LinExpr(v.s) <= 1.0, "no_migration_" + tag);
  }
  for (int k = 0; k < pool; ++k)
    if (!per_node[k].terms().empty()) f.model.AddConstraint(per_node[k] <= 1.0, "node_" + std::to_string(k));
  std::string note;
  const milp::Result result = SolveGoal(options, &f, &note);
  MilpOutcome out = Outcome(result, note);
  if (!result.has_solution) return out;
  out.job_of_pool_node.assign(pool, -1);
  std::vector<int> counts(num_jobs, 0);
  for (int j = 0; j < num_jobs; ++j) {
    if (f.vars[j].fixed_zero) continue;
    for (int k = 0; k < pool; ++k) {
      if (result.values[x[j][k].index()] < 0.5) continue;
      if (out.job_of_pool_node[k] >= 0) {
        out.message += "; rejected: node assigned twice";
        return out;
      }
      out.job_of_pool_node[k] = j;
      ++counts[j];
    }
  }
  std::string error;
  if (!CheckCounts(prepared, counts, &error)) {
    out.message += "; rejected: " + error;
    return out;
  }
  for (int j = 0; j < num_jobs; ++j) {
    bool added = false, released = false;
    for (int k = 0; k < pool; ++k) {
      added |= out.job_of_pool_node[k] == j && owner[k] != j;
      released |= owner[k] == j && out.job_of_pool_node[k] != j;
    }
    if (added && released) {
      out.message += "; rejected: job " + std::to_string(j) + " would migrate";
      return out;
    }
  }
  out.has_solution = true;
  return out;
}

}  // namespace bft::alloc::internal
