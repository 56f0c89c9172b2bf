// The two MILP formulations, built with bft::milp and solved by a registered backend.
//
// Count level (one integer n_j per job):
//   n_j in [0, M_j] integer, r_j binary:      min_j r_j <= n_j <= M_j r_j          (0 or [min, max])
//   g_j binary (if M_j > c_j):                n_j <= c_j + (M_j - c_j) g_j          (grow => g_j = 1)
//   s_j binary (if c_j > 0):                  n_j >= c_j (1 - s_j)                  (shrink => s_j = 1)
//   y_j = O_j(n_j) piecewise linear (SOS2) through 0, min_j, the curve breakpoints, M_j
//   sum_j n_j <= N
//   maximise  sum_j w_j (tfwd y_j - up_j g_j - down_j s_j)
// Node level (the BFTrainer paper): binaries x_jk for job j on pool node k, n_j = sum_k x_jk,
// sum_j x_jk <= 1 for every node, and no migration spelt out per node: x_jk >= 1 - s_j for the
// job's current nodes, x_jk <= g_j for every other node, g_j + s_j <= 1.
// Max-min goal: first maximise t subject to y_j >= t O_j(max_nodes), then fix t (less 1e-7) and
// maximise the weighted objective.
#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "alloc/internal.h"

namespace bft::alloc::internal {

namespace {

constexpr double kFairSlack = 1e-7;

struct JobVars {
  bool fixed_zero = true;  // the job cannot run (its max is below its min once capped by the pool)
  milp::Var n, r, g, s, y;
  bool has_g = false, has_s = false;
};

struct Formulation {
  milp::Model model{"bft_alloc"};
  std::vector<JobVars> vars;
  milp::LinExpr objective;
};

// Variables and constraints every job has in both formulations (n_j is created here as well).
void AddJobs(const Problem& problem, const Prepared& prepared, Formulation* f) {
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
    v.n = f->model.AddInteger(0, top, "n_" + tag);
    v.r = f->model.AddBinary("r_" + tag);
    f->model.AddConstraint(milp::LinExpr(v.n) - d.min_nodes * milp::LinExpr(v.r) >= 0.0, "min_" + tag);
    f->model.AddConstraint(milp::LinExpr(v.n) - top * milp::LinExpr(v.r) <= 0.0, "max_" + tag);
    if (top > d.current) {
      v.has_g = true;
      v.g = f->model.AddBinary("g_" + tag);
      f->model.AddConstraint(milp::LinExpr(v.n) - (top - d.current) * milp::LinExpr(v.g) <= d.current,
                             "grow_" + tag);
    }
    if (d.current > 0) {
      v.has_s = true;
      v.s = f->model.AddBinary("s_" + tag);
      f->model.AddConstraint(milp::LinExpr(v.n) + d.current * milp::LinExpr(v.s) >= d.current,
                             "shrink_" + tag);
    }
    std::vector<double> xs{0.0}, ys{0.0};
    xs.push_back(d.min_nodes);
    ys.push_back(d.value[d.min_nodes]);
    for (int b : d.breakpoints)
      if (b > d.min_nodes && b < top) {
        xs.push_back(b);
        ys.push_back(d.value[b]);
      }
    if (top > d.min_nodes) {
      xs.push_back(top);
      ys.push_back(d.value[top]);
    }
    v.y = f->model.AddPiecewiseLinear(v.n, xs, ys, "O_" + tag);
    f->objective += (d.weight * prepared.tfwd_s) * milp::LinExpr(v.y);
    if (v.has_g) f->objective -= (d.weight * d.up_penalty) * milp::LinExpr(v.g);
    if (v.has_s) f->objective -= (d.weight * d.down_penalty) * milp::LinExpr(v.s);
  }
  (void)problem;
}

// Solves f->model with the goal; fills `result` with the final solve.
milp::Result SolveGoal(const Problem& problem, const Prepared& prepared, const SolveOptions& options,
                       Formulation* f, std::string* note) {
  const std::unique_ptr<milp::Backend> backend = milp::MakeBackend(options.milp_backend);
  if (options.goal == Goal::kMaxMinFair && !prepared.jobs.empty()) {
    // Normalised values are capped at 1 (see Goal::kMaxMinFair), hence t <= 1.
    milp::Var t = f->model.AddContinuous(0.0, 1.0, "t");
    for (std::size_t j = 0; j < prepared.jobs.size(); ++j) {
      const double top = problem.jobs[j].objective.Evaluate(problem.jobs[j].max_nodes);
      if (!(top > 0.0)) continue;  // normalised value 1 whatever the count
      const std::string tag = std::to_string(j);
      if (f->vars[j].fixed_zero) {
        f->model.AddConstraint(milp::LinExpr(t) <= 0.0, "fair_" + tag);
      } else {
        f->model.AddConstraint(milp::LinExpr(f->vars[j].y) - top * milp::LinExpr(t) >= 0.0, "fair_" + tag);
      }
    }
    f->model.Maximize(milp::LinExpr(t));
    const milp::Result first = backend->Solve(f->model, options.milp);
    if (!first.has_solution) return first;
    const double tau = first.Value(t);
    std::ostringstream os;
    os << "max-min phase: min normalised value " << tau << " (" << milp::ToString(first.termination) << "); ";
    *note = os.str();
    f->model.AddConstraint(milp::LinExpr(t) >= std::max(0.0, tau - kFairSlack), "t_fixed");
  }
  f->model.Maximize(f->objective);
  return backend->Solve(f->model, options.milp);
}

MilpOutcome Outcome(const milp::Result& result, const std::string& note) {
  MilpOutcome out;
  out.termination = result.termination;
  out.proven_optimal = result.optimal();
  std::ostringstream os;
  os << note << result.backend << ": " << milp::ToString(result.termination);
  if (!result.message.empty()) os << " (" << result.message << ")";
  if (result.has_solution) os << ", objective " << result.objective << ", gap " << result.gap;
  out.message = os.str();
  return out;
}

}  // namespace

MilpOutcome SolveCountMilp(const Problem& problem, const Prepared& prepared, const SolveOptions& options) {
  Formulation f;
  AddJobs(problem, prepared, &f);
  milp::LinExpr total;
  for (const JobVars& v : f.vars)
    if (!v.fixed_zero) total += milp::LinExpr(v.n);
  f.model.AddConstraint(total <= prepared.pool_size, "pool");
  std::string note;
  const milp::Result result = SolveGoal(problem, prepared, options, &f, &note);
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

MilpOutcome SolveNodeMilp(const Problem& problem, const Prepared& prepared, const SolveOptions& options) {
  Formulation f;
  AddJobs(problem, prepared, &f);
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
  const milp::Result result = SolveGoal(problem, prepared, options, &f, &note);
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
