// Problem validation, the reduction to per-job tables, scoring and node assignment from counts.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "alloc/internal.h"

namespace bft::alloc {

namespace {

bool Fail(std::string* error, const std::string& why) {
  if (error != nullptr) *error = why;
  return false;
}

std::string JobName(const Job& job, std::size_t index) {
  std::ostringstream os;
  os << "job " << index << " ('" << job.id << "')";
  return os.str();
}

}  // namespace

Job FromJobSpec(const jobs::JobSpec& spec) {
  Job job;
  job.id = spec.name;
  job.min_nodes = spec.min_nodes;
  job.max_nodes = spec.max_nodes;
  job.objective = spec.objective;
  job.throughput = spec.throughput;
  job.scale_up_s = spec.scale_up_s;
  job.scale_down_s = spec.scale_down_s;
  job.restart_s = spec.restart_s;
  job.weight = spec.weight;
  job.configurations = spec.configurations;
  return job;
}

bool Problem::IsValid(std::string* error) const {
  // Messages are built only on failure: this runs on every event, over thousands of nodes.
  if (!std::isfinite(tfwd_s) || !(tfwd_s > 0.0)) {
    std::ostringstream os;
    os << "tfwd_s must be a finite number > 0, got " << tfwd_s;
    return Fail(error, os.str());
  }
  std::unordered_set<std::string> ids;
  ids.reserve(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    auto fail = [&](auto&&... parts) {
      std::ostringstream os;
      os << JobName(job, j) << ": ";
      (os << ... << parts);
      return Fail(error, os.str());
    };
    if (job.id.empty()) return Fail(error, "job " + std::to_string(j) + ": id is empty");
    if (!ids.insert(job.id).second) return fail("duplicate job id");
    if (job.min_nodes < 1) return fail("min_nodes ", job.min_nodes, " must be >= 1");
    if (job.max_nodes < job.min_nodes)
      return fail("min_nodes ", job.min_nodes, " > max_nodes ", job.max_nodes);
    if (!std::isfinite(job.scale_up_s) || job.scale_up_s < 0.0)
      return fail("scale_up_s ", job.scale_up_s, " must be a finite number >= 0");
    if (!std::isfinite(job.scale_down_s) || job.scale_down_s < 0.0)
      return fail("scale_down_s ", job.scale_down_s, " must be a finite number >= 0");
    if (!std::isfinite(job.restart_s) || job.restart_s < 0.0)
      return fail("restart_s ", job.restart_s, " must be a finite number >= 0");
    if (!std::isfinite(job.weight) || job.weight < 0.0)
      return fail("weight ", job.weight, " must be a finite number >= 0");
    if (!std::isfinite(job.remaining_samples) || job.remaining_samples < 0.0)
      return fail("remaining_samples ", job.remaining_samples, " must be a finite number >= 0 (0: unknown)");
    if (job.objective.empty()) return fail("objective curve is empty (give at least one breakpoint)");
    {
      const auto& values = job.objective.values();
      const double top = *std::max_element(values.begin(), values.end());
      const std::pair<const char*, double> horizons[] = {
          {"tfwd_s", tfwd_s},
          {"scale_up_s", job.scale_up_s},
          {"scale_down_s", job.scale_down_s},
          {"scale_down_s + restart_s", job.scale_down_s + job.restart_s}};
      for (const auto& [field, seconds] : horizons) {
        const double term = seconds * job.weight * top;
        if (!(term <= kMaxObjectiveTerm)) {
          return fail(field, " ", seconds, " x weight ", job.weight, " x largest objective value ", top,
                      " = ", term, " exceeds ", kMaxObjectiveTerm, " (the objective would overflow)");
        }
      }
    }
    const int configurations = static_cast<int>(job.configurations.size());
    if (job.configuration < 0 || job.configuration > configurations)
      return fail("configuration ", job.configuration, " is outside 0..", configurations,
                  " (0: the job's own curves, k: configurations[k - 1])");
    std::unordered_set<std::string> names{"full"};
    for (int k = 0; k < configurations; ++k) {
      const Configuration& c = job.configurations[static_cast<std::size_t>(k)];
      const std::string where = "configurations[" + std::to_string(k) + "]";
      std::string why;
      if (!c.IsValid(&why))
        return fail(where, c.name.empty() || c.name == "full" ? "" : " ('" + c.name + "')", ": ", why);
      if (!names.insert(c.name).second) return fail(where, ": name '", c.name, "' is taken");
      const auto& values = c.objective.values();
      const double term = std::max({tfwd_s, job.scale_up_s, job.scale_down_s + job.restart_s}) * job.weight *
                          *std::max_element(values.begin(), values.end());
      if (!(term <= kMaxObjectiveTerm))
        return fail(where, " ('", c.name, "'): its largest objective value times the horizon and weight is ",
                    term, ", above ", kMaxObjectiveTerm, " (the objective would overflow)");
    }
    // ThroughputCurve validates its breakpoints when it is built; nothing else to check here.
  }
  std::unordered_set<NodeId> in_pool;
  in_pool.reserve(pool.size());
  for (std::size_t k = 0; k < pool.size(); ++k) {
    if (!in_pool.insert(pool[k]).second) {
      std::ostringstream os;
      os << "pool[" << k << "]: node " << pool[k] << " appears twice in the pool";
      return Fail(error, os.str());
    }
  }
  if (!expected_idle_s.empty() && expected_idle_s.size() != pool.size()) {
    return Fail(error, "expected_idle_s has " + std::to_string(expected_idle_s.size()) +
                           " entries; give none or one per pool node (" + std::to_string(pool.size()) + ")");
  }
  for (std::size_t k = 0; k < expected_idle_s.size(); ++k) {
    if (!std::isfinite(expected_idle_s[k]) || !(expected_idle_s[k] > 0.0)) {
      std::ostringstream os;
      os << "expected_idle_s[" << k << "] (node " << pool[k] << "): " << expected_idle_s[k]
         << " must be a finite number of seconds > 0";
      return Fail(error, os.str());
    }
  }
  std::unordered_set<NodeId> mapped;
  mapped.reserve(current.size());
  for (std::size_t k = 0; k < current.size(); ++k) {
    const Assignment& a = current[k];
    const char* why = nullptr;
    if (in_pool.count(a.node) == 0)
      why = " is not in the pool (remove nodes the main scheduler took back from the map)";
    else if (!mapped.insert(a.node).second)
      why = " is mapped twice";
    else if (ids.count(a.job) == 0)
      why = " runs an unknown job";
    if (why != nullptr) {
      std::ostringstream os;
      os << "current[" << k << "]: node " << a.node << " (job '" << a.job << "')" << why;
      return Fail(error, os.str());
    }
  }
  return true;
}

bool SolveOptions::IsValid(std::string* error) const {
  std::string why;
  if (!milp.IsValid(&why)) return Fail(error, "milp options: " + why);
  const internal::Registration* policy = internal::FindRegistration(solver);
  if (policy == nullptr) return Fail(error, internal::UnknownPolicy(solver));
  if (policy->info.solves_milp && milp_backend.empty())
    return Fail(error, "milp_backend is empty (name a backend, e.g. \"glpk\")");
  if (goal != Goal::kThroughput && goal != Goal::kMaxMinFair) return Fail(error, "goal is not a known Goal");
  return true;
}

const char* ToString(Goal goal) { return goal == Goal::kMaxMinFair ? "max_min_fair" : "throughput"; }

Goal GoalFromString(const std::string& name) {
  for (const Goal goal : {Goal::kThroughput, Goal::kMaxMinFair}) {
    if (name == ToString(goal)) return goal;
  }
  throw InvalidArgument("goal: unknown goal '" + name + "' (expected throughput or max_min_fair)");
}

namespace internal {

Prepared Prepare(const Problem& problem, ConfigurationChoice choice) {
  Prepared prepared;
  prepared.pool_size = static_cast<int>(problem.pool.size());
  prepared.tfwd_s = problem.tfwd_s;
  std::unordered_map<std::string, int> index;
  index.reserve(problem.jobs.size());
  for (std::size_t j = 0; j < problem.jobs.size(); ++j)
    index.emplace(problem.jobs[j].id, static_cast<int>(j));
  prepared.jobs.resize(problem.jobs.size());
  for (const Assignment& a : problem.current) prepared.jobs[index.at(a.job)].current_nodes.push_back(a.node);
  for (std::size_t j = 0; j < problem.jobs.size(); ++j) {
    const Job& job = problem.jobs[j];
    JobData& d = prepared.jobs[j];
    std::sort(d.current_nodes.begin(), d.current_nodes.end());
    d.min_nodes = job.min_nodes;
    d.max_nodes = std::min(job.max_nodes, prepared.pool_size);
    d.current = static_cast<int>(d.current_nodes.size());
    const bool running = d.current >= job.min_nodes;
    d.current_value = running ? ConfigurationValue(job, job.configuration, d.current) : 0.0;
    d.up_penalty = job.scale_up_s * d.current_value;
    d.down_penalty = job.scale_down_s * d.current_value;
    d.stop_penalty = (job.scale_down_s + job.restart_s) * d.current_value;
    d.weight = job.weight;
    const int top = std::max(d.max_nodes, 0);
    d.value.resize(static_cast<std::size_t>(top) + 1);
    d.value[0] = 0.0;
    const int configurations = 1 + static_cast<int>(job.configurations.size());
    d.normalizer = 0.0;
    for (int k = 0; k < configurations; ++k)
      d.normalizer = std::max(d.normalizer, ConfigurationValue(job, k, job.max_nodes));
    if (job.configurations.empty()) {
      for (int n = 1; n <= top; ++n) d.value[n] = job.objective.Evaluate(n);
      for (int b : job.objective.nodes())
        if (b >= 1 && b <= top) d.breakpoints.push_back(b);
      continue;
    }
    // The best configuration at each count, a switch at the current count paying its restart. The
    // best of several curves bends between their breakpoints: every count is a breakpoint.
    d.configuration.assign(static_cast<std::size_t>(top) + 1, job.configuration);
    d.switch_penalty.assign(static_cast<std::size_t>(top) + 1, 0.0);
    const int first = choice == ConfigurationChoice::kCurrent ? job.configuration : 0;
    const int last = choice == ConfigurationChoice::kAny    ? configurations - 1
                     : choice == ConfigurationChoice::kFull ? 0
                                                            : job.configuration;
    for (int n = 1; n <= top; ++n) {
      double best = -std::numeric_limits<double>::infinity();
      for (int k = first; k <= last; ++k) {
        const double restart = k != job.configuration && running && n == d.current ? d.up_penalty : 0.0;
        const double value = ConfigurationValue(job, k, n) - restart / prepared.tfwd_s;
        if (value > best || (value == best && k == job.configuration)) {
          best = value;
          d.configuration[n] = k;
          d.switch_penalty[n] = restart;
        }
      }
      d.value[n] = best;
      d.breakpoints.push_back(n);
    }
  }
  return prepared;
}

double ConfigurationValue(const Job& job, int configuration, int n) {
  if (configuration == 0) return job.objective.Evaluate(n);
  const Configuration& c = job.configurations[static_cast<std::size_t>(configuration - 1)];
  return c.efficiency * c.objective.Evaluate(n);
}

std::vector<int> LinearityBreaks(const JobData& job, bool around_current) {
  std::vector<int> breaks;
  for (int b : job.breakpoints)
    if (b >= 0 && b <= job.max_nodes) breaks.push_back(b);
  if (around_current)
    for (int n = job.current - 1; n <= job.current + 1; ++n)
      if (n >= 0 && n <= job.max_nodes) breaks.push_back(n);
  std::sort(breaks.begin(), breaks.end());
  breaks.erase(std::unique(breaks.begin(), breaks.end()), breaks.end());
  return breaks;
}

double NormalizedValue(const JobData& job, int n) {
  if (!(job.normalizer > 0.0)) return 1.0;
  return std::min(1.0, (n == 0 ? 0.0 : job.value[n]) / job.normalizer);
}

const curve::ThroughputCurve& ConfigurationRate(const Job& job, int configuration) {
  if (configuration == 0) return job.throughput.empty() ? job.objective : job.throughput;
  const Configuration& c = job.configurations[static_cast<std::size_t>(configuration - 1)];
  return c.throughput.empty() ? c.objective : c.throughput;
}

bool CheckCounts(const Prepared& prepared, const std::vector<int>& counts, std::string* error) {
  if (counts.size() != prepared.jobs.size()) return Fail(error, "wrong number of counts");
  long long total = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (!Feasible(prepared.jobs[j], counts[j])) {
      std::ostringstream os;
      os << "job " << j << ": count " << counts[j] << " is neither 0 nor within ["
         << prepared.jobs[j].min_nodes << ", " << prepared.jobs[j].max_nodes << "]";
      return Fail(error, os.str());
    }
    total += counts[j];
  }
  if (total > prepared.pool_size) {
    std::ostringstream os;
    os << "counts use " << total << " nodes, the pool has " << prepared.pool_size;
    return Fail(error, os.str());
  }
  return true;
}

void Score(const Problem& problem, const Prepared& prepared, Allocation* allocation) {
  double objective = 0.0;
  double min_normalized = 1.0;
  for (std::size_t j = 0; j < prepared.jobs.size(); ++j) {
    const JobData& d = prepared.jobs[j];
    JobAllocation& ja = allocation->jobs[j];
    const int n = ja.nodes_after;
    const Job& job = problem.jobs[j];
    const double restart = d.switch_penalty.empty() ? 0.0 : d.switch_penalty[n];
    ja.configuration = d.configuration.empty() ? job.configuration : d.configuration[n];
    ja.value = d.value[n] + restart / prepared.tfwd_s;
    ja.rate = n == 0 ? 0.0 : ConfigurationRate(job, ja.configuration).Evaluate(n);
    ja.penalty = Penalty(d, n) + restart;
    objective += Contribution(d, n, prepared.tfwd_s);
    min_normalized = std::min(min_normalized, NormalizedValue(d, n));
  }
  allocation->objective = objective;
  allocation->min_normalized_value = min_normalized;
}

namespace {

void BuildMap(Allocation* allocation) {
  std::size_t total = 0;
  for (const JobAllocation& ja : allocation->jobs) total += ja.kept.size() + ja.added.size();
  allocation->map.clear();
  allocation->map.reserve(total);
  for (const JobAllocation& ja : allocation->jobs) {
    for (NodeId n : ja.kept) allocation->map.push_back({n, ja.id});
    for (NodeId n : ja.added) allocation->map.push_back({n, ja.id});
  }
  std::sort(allocation->map.begin(), allocation->map.end(),
            [](const Assignment& a, const Assignment& b) { return a.node < b.node; });
}

}  // namespace

Allocation FromCounts(const Problem& problem, const Prepared& prepared, const std::vector<int>& counts,
                      const std::vector<NodeId>& preference) {
  // With a preference, nodes go by their place in it; without, by id (current_nodes and free_nodes
  // sorted by id are then already in order, and so is every slice of them).
  const bool ranked = !preference.empty();
  std::unordered_map<NodeId, std::size_t> rank;
  rank.reserve(preference.size());
  for (std::size_t k = 0; k < preference.size(); ++k) rank.emplace(preference[k], k);
  auto better = [&](NodeId a, NodeId b) { return rank.at(a) < rank.at(b); };
  Allocation allocation;
  allocation.jobs.resize(prepared.jobs.size());
  std::vector<NodeId> free_nodes;
  {
    std::unordered_set<NodeId> busy;
    busy.reserve(problem.current.size());
    for (const Assignment& a : problem.current) busy.insert(a.node);
    for (NodeId n : problem.pool)
      if (busy.count(n) == 0) free_nodes.push_back(n);
  }
  for (std::size_t j = 0; j < prepared.jobs.size(); ++j) {
    const JobData& d = prepared.jobs[j];
    JobAllocation& ja = allocation.jobs[j];
    ja.id = problem.jobs[j].id;
    ja.nodes_before = d.current;
    ja.nodes_after = counts[j];
    const int keep = std::min(counts[j], d.current);
    std::vector<NodeId> mine;
    if (ranked) {
      mine = d.current_nodes;
      std::sort(mine.begin(), mine.end(), better);
    }
    const std::vector<NodeId>& order = ranked ? mine : d.current_nodes;
    ja.kept.assign(order.begin(), order.begin() + keep);
    ja.released.assign(order.begin() + keep, order.end());
    if (ranked) {
      std::sort(ja.kept.begin(), ja.kept.end());
      std::sort(ja.released.begin(), ja.released.end());
    }
    free_nodes.insert(free_nodes.end(), ja.released.begin(), ja.released.end());
  }
  if (ranked) {
    std::sort(free_nodes.begin(), free_nodes.end(), better);
  } else {
    std::sort(free_nodes.begin(), free_nodes.end());
  }
  std::size_t next = 0;
  for (std::size_t j = 0; j < prepared.jobs.size(); ++j) {
    JobAllocation& ja = allocation.jobs[j];
    const int grow = counts[j] - prepared.jobs[j].current;
    if (grow <= 0) continue;
    if (next + grow > free_nodes.size()) throw Error("alloc: internal error: counts exceed the pool");
    ja.added.assign(free_nodes.begin() + next, free_nodes.begin() + next + grow);
    if (ranked) std::sort(ja.added.begin(), ja.added.end());
    next += grow;
  }
  BuildMap(&allocation);
  Score(problem, prepared, &allocation);
  return allocation;
}

Allocation FromMap(const Problem& problem, const Prepared& prepared,
                   const std::vector<int>& job_of_pool_node) {
  Allocation allocation;
  const std::size_t num_jobs = prepared.jobs.size();
  allocation.jobs.resize(num_jobs);
  std::unordered_map<NodeId, int> before;
  before.reserve(problem.current.size());
  for (std::size_t j = 0; j < num_jobs; ++j) {
    for (NodeId n : prepared.jobs[j].current_nodes) before.emplace(n, static_cast<int>(j));
    allocation.jobs[j].id = problem.jobs[j].id;
    allocation.jobs[j].nodes_before = prepared.jobs[j].current;
  }
  for (std::size_t k = 0; k < problem.pool.size(); ++k) {
    const NodeId node = problem.pool[k];
    const int after = job_of_pool_node[k];
    const auto it = before.find(node);
    const int was = it == before.end() ? -1 : it->second;
    if (was >= 0 && was == after) allocation.jobs[was].kept.push_back(node);
    if (was >= 0 && was != after) allocation.jobs[was].released.push_back(node);
    if (after >= 0 && was != after) allocation.jobs[after].added.push_back(node);
  }
  for (std::size_t j = 0; j < num_jobs; ++j) {
    JobAllocation& ja = allocation.jobs[j];
    std::sort(ja.kept.begin(), ja.kept.end());
    std::sort(ja.added.begin(), ja.added.end());
    std::sort(ja.released.begin(), ja.released.end());
    ja.nodes_after = static_cast<int>(ja.kept.size() + ja.added.size());
    if (!ja.added.empty() && !ja.released.empty())
      throw Error("alloc: internal error: job '" + ja.id +
                  "' would migrate (it both adds and releases nodes)");
    if (!Feasible(prepared.jobs[j], ja.nodes_after))
      throw Error("alloc: internal error: job '" + ja.id + "' gets a count outside [min_nodes, max_nodes]");
  }
  BuildMap(&allocation);
  Score(problem, prepared, &allocation);
  return allocation;
}

}  // namespace internal
}  // namespace bft::alloc
