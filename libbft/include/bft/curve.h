// bft::curve — throughput curves: samples/s (or any value) as a function of the node count, and
// fitting such curves from measured samples. The online profiling advisor that learns curves from
// running jobs' progress reports is in bft/profiling.h. Models, selection rule, statuses and the
// extrapolation rule are documented in docs/curve.md.
#pragma once

#include <array>
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
  // Values at 0, 1, ..., max_nodes (a dense table: memory grows with max_nodes).
  std::vector<double> Table(int max_nodes) const;

  const std::vector<int>& nodes() const { return nodes_; }
  const std::vector<double>& values() const { return values_; }
  bool empty() const { return nodes_.empty(); }

 private:
  std::vector<int> nodes_;
  std::vector<double> values_;
};

// ---------------------------------------------------------------------------------------------
// Fitting. Every model describes the time per sample t(n) = 1 / X(n) of a job on n nodes, X in
// samples/s (exact forms in docs/curve.md):
//   kAmdahl   t = a + b/n                                 a, b >= 0 (non-negative least squares)
//   kOptimus  t = a + b/n + c*log2(n)/n                   a, b, c >= 0 (NNLS; step time
//             b + c*log2(n) + a*n for a fixed per-node batch: compute, tree all-reduce latency,
//             per-sample overhead)
//   kCommLog  t = a + b/n + c*log2(n)                     a, b, c >= 0 (NNLS; turns down at large n)
//   kUsl      X = lambda*n / (1 + sigma*(n-1) + kappa*n*(n-1)),  lambda > 0, 0 <= sigma <= 1,
//             kappa >= 0 (Universal Scalability Law; Levenberg-Marquardt; turns down when kappa > 0)
// Residuals are relative (X_model / X_measured - 1), weighted by the samples' weights.
enum class Model { kAuto, kAmdahl, kOptimus, kCommLog, kUsl };
inline constexpr int kNumModels = 4;  // the concrete models (not kAuto)
inline constexpr std::array<Model, kNumModels> kAllModels = {Model::kAmdahl, Model::kOptimus, Model::kCommLog,
                                                             Model::kUsl};
// "auto", "amdahl", "optimus", "comm_log", "usl"; ModelFromString throws InvalidArgument otherwise.
const char* ToString(Model model);
Model ModelFromString(const std::string& name);
int NumParameters(Model model);  // 2 for kAmdahl, 3 for the others, 0 for kAuto

// Why a fit did or did not produce parameters. Only kOk comes with usable parameters.
enum class FitStatus {
  kOk,
  kInsufficientData,  // fewer distinct node counts than the model has parameters (or than 2)
  kIllConditioned,    // the normal equations are (near) singular: parameters are not identifiable
  kNotConverged,      // the iterative fit (kUsl) reached max_iterations, or stalled (no step lowers
                      // the cost although the projected gradient is not small)
};
const char* ToString(FitStatus status);  // "ok", "insufficient_data", "ill_conditioned", "not_converged"

// How kAuto picks among the models that fitted.
enum class Selection {
  kLeaveOneOut,  // smallest leave-one-out RMS relative error (needs >= 3 distinct sizes)
  kAicc,         // smallest corrected Akaike information criterion (needs > k + 1 distinct sizes)
};
const char* ToString(Selection selection);  // "loo", "aicc"
Selection SelectionFromString(const std::string& name);

// One measurement: a job ran on `nodes` nodes at `samples_per_s`. `weight` (> 0) scales its
// squared residual. Several samples at one node count are allowed if their values agree within
// FitOptions::duplicate_tolerance (they are then averaged, weight-summed); otherwise Fit throws.
// Fits are scale-invariant: multiplying every rate by c > 0 multiplies every prediction by c.
struct Sample {
  double nodes = 0.0;
  double samples_per_s = 0.0;
  double weight = 1.0;
};

struct FitOptions {
  Model model = Model::kAuto;  // force one model, or kAuto to choose
  Selection selection = Selection::kLeaveOneOut;
  int max_iterations = 100;  // Levenberg-Marquardt iterations for kUsl
  // kUsl convergence: Gauss-Newton decrement, or the cost change of an (almost) undamped step,
  // below tolerance * cost.
  double tolerance = 1e-10;
  // Samples at one node count conflict (Fit throws) when their spread (max - min) exceeds
  // duplicate_tolerance times their weighted mean. 0.2: repeated measurements of throughput at a
  // fixed size normally agree within a few percent, so a 20% spread means different conditions
  // (another batch size, a slow node, a phase change), not noise.
  double duplicate_tolerance = 0.2;
  // Extrapolation beyond the largest measured node count n_max: the predicted gain over X(n_max)
  // is multiplied by extrapolation_discount (in [0, 1]) and stops growing at
  // extrapolation_limit * n_max (>= 1); a predicted loss is kept in full. See docs/curve.md.
  double extrapolation_discount = 0.5;
  double extrapolation_limit = 2.0;
  bool IsValid(std::string* error) const;
};

// The outcome for one concrete model.
struct ModelFit {
  Model model = Model::kAmdahl;
  FitStatus status = FitStatus::kInsufficientData;
  std::array<double, 3> params{};  // kAmdahl: a, b; kOptimus/kCommLog: a, b, c; kUsl: lambda, sigma, kappa
  double rms_rel_error = 0.0;      // weighted RMS relative error on the fitted samples
  double loo_rel_error = -1.0;     // leave-one-out RMS relative error; -1 if not computed
  double aicc = 0.0;               // corrected AIC (+inf where undefined)
  int iterations = 0;              // Levenberg-Marquardt iterations (kUsl), 0 otherwise
  // The model's raw prediction in samples/s (no extrapolation rule); 0 if status != kOk.
  double Predict(double n) const;
};

struct FitResult {
  FitStatus status = FitStatus::kInsufficientData;  // the status of `best` (or why nothing fitted)
  std::string message;                              // human-readable reason, empty when kOk
  ModelFit best;                                    // the forced or automatically chosen model
  std::vector<ModelFit> candidates;                 // every model tried, in kAllModels order
  int num_sizes = 0;                                // distinct node counts after merging duplicates
  double min_nodes = 0.0;                           // smallest / largest measured node count
  double max_nodes = 0.0;
  FitOptions options;

  bool ok() const { return status == FitStatus::kOk; }
  Model model() const { return best.model; }
  // Raw model prediction (samples/s) at n > 0; throws bft::Error if !ok().
  double Predict(double n) const;
  // Prediction with the conservative extrapolation rule beyond max_nodes; 0 at n <= 0.
  double Evaluate(double n) const;
  // The curve the allocator consumes, on 0..max_nodes: exactly Evaluate() at sparse breakpoints
  // (0; 1, 2, 3, 4, 6, 8, 12, ... up to max_nodes; max_nodes; the largest measured size and
  // extrapolation_limit times it), linear in between: O(log max_nodes) breakpoints for any
  // max_nodes (docs/curve.md, "Curves for the allocator"). Throws if !ok() or max_nodes < 1.
  ThroughputCurve ToCurve(int max_nodes) const;
};

// Fits the samples. Throws bft::InvalidArgument (naming the sample) for invalid input: no
// samples, a non-finite or non-positive node count, a non-finite or negative rate, a non-positive
// or non-finite weight, duplicate node counts with conflicting rates, or invalid options. Not
// enough data to fit is a status (kInsufficientData), not an exception.
FitResult Fit(const std::vector<Sample>& samples, const FitOptions& options = {});
// The same from parallel arrays; `weights` may be empty (all 1).
FitResult Fit(const std::vector<double>& nodes, const std::vector<double>& samples_per_s,
              const std::vector<double>& weights = {}, const FitOptions& options = {});

}  // namespace bft::curve
