// CPLEX-LP export of a bft::milp::Model.
//
// Portable subset: ranged rows (lower < upper, both finite) become two rows `<name>_lo` and
// `<name>_hi`; the objective constant is written as a comment (GLPK's reader rejects constants);
// a piecewise-linear function y = f(x) becomes weights w_k >= 0 with sum w_k = 1,
// x = sum xs_k w_k, y = sum ys_k w_k and an SOS2 set over the weights. Names are made valid LP
// names (letters, digits, '_' and '.'; not starting with a digit, '.', 'e' + digit or a keyword)
// and unique.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "bft/milp.h"
#include "milp/internal.h"

namespace bft::milp {
namespace {

using internal::FormatNumber;

bool IsKeyword(std::string lower) {
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> kKeywords = {
      "max",     "maximize", "maximum",  "maximise", "min",     "minimize",
      "minimum", "minimise", "st",       "s.t.",     "st.",     "subject",
      "such",    "bound",    "bounds",   "free",     "inf",     "infinity",
      "gen",     "general",  "generals", "int",      "integer", "integers",
      "bin",     "binary",   "binaries", "sos",      "sos1",    "sos2",
      "s1",      "s2",       "end",      "semi",     "semis",   "semi-continuous",
      "obj"};
  return kKeywords.count(lower) != 0;
}

// Produces valid, unique LP names.
class NameTable {
 public:
  std::string Make(const std::string& requested) {
    std::string name;
    for (unsigned char c : requested.substr(0, 200)) {
      name += (std::isalnum(c) != 0 || c == '_' || c == '.') ? static_cast<char>(c) : '_';
    }
    if (name.empty()) name = "_";
    const bool starts_badly = std::isdigit(static_cast<unsigned char>(name[0])) != 0 || name[0] == '.' ||
                              ((name[0] == 'e' || name[0] == 'E') &&
                               (name.size() == 1 || std::isdigit(static_cast<unsigned char>(name[1])) != 0 ||
                                name[1] == 'e' || name[1] == 'E'));
    if (starts_badly || IsKeyword(name)) name = "_" + name;
    std::string unique = name;
    for (int suffix = 1; used_.count(unique) != 0; ++suffix) unique = name + "_" + std::to_string(suffix);
    used_.insert(unique);
    return unique;
  }

 private:
  std::set<std::string> used_;
};

// Writes " + 3 x - y" style terms, wrapping long lines (some readers limit line length).
class LineWriter {
 public:
  explicit LineWriter(std::ostringstream* out) : out_(out) {}
  void Start(const std::string& text) {
    *out_ << text;
    column_ = text.size();
    first_ = true;
  }
  void Term(double coef, const std::string& name) {
    std::string text;
    if (coef < 0) {
      text = first_ ? "- " : " - ";
      coef = -coef;
    } else {
      text = first_ ? "" : " + ";
    }
    if (coef != 1.0) text += FormatNumber(coef) + " ";
    text += name;
    Put(text);
    first_ = false;
  }
  void Put(const std::string& text) {
    if (column_ + text.size() > 100) {
      *out_ << "\n   ";
      column_ = 3;
    }
    *out_ << text;
    column_ += text.size();
  }
  void End() { *out_ << "\n"; }
  bool empty() const { return first_; }

 private:
  std::ostringstream* out_;
  std::size_t column_ = 0;
  bool first_ = true;
};

}  // namespace

std::string Model::ToLpString() const {
  NameTable names;
  std::vector<std::string> var_names;
  var_names.reserve(static_cast<std::size_t>(num_vars()));
  for (int j = 0; j < num_vars(); ++j) var_names.push_back(names.Make(var(j).name));
  // Generated weight variables of the piecewise-linear functions.
  const auto& pwl = piecewise_linear();
  std::vector<std::vector<std::string>> weight_names(pwl.size());
  for (std::size_t p = 0; p < pwl.size(); ++p) {
    for (std::size_t k = 0; k < pwl[p].xs.size(); ++k) {
      weight_names[p].push_back(names.Make(pwl[p].name + "_w" + std::to_string(k)));
    }
  }
  // A variable to put in rows that have no terms (an LP row needs one); only made when needed.
  std::string zero_var;
  auto any_var = [&]() -> std::string {
    if (!var_names.empty()) return var_names.front();
    if (zero_var.empty()) zero_var = names.Make("bft_zero");
    return zero_var;
  };

  std::ostringstream out;
  out << "\\ Model " << name() << " (" << num_vars() << " variables, " << num_constraints()
      << " constraints, " << pwl.size() << " piecewise-linear functions), written by libbft\n";
  if (objective_constant() != 0.0) {
    out << "\\ Objective constant: " << FormatNumber(objective_constant())
        << " (not written below: add it to the objective value)\n";
  }
  out << (sense() == Sense::kMaximize ? "Maximize\n" : "Minimize\n");
  LineWriter line(&out);
  line.Start(" obj: ");
  const RowData& obj = objective();
  for (std::size_t k = 0; k < obj.vars.size(); ++k) line.Term(obj.coefs[k], var_names[obj.vars[k]]);
  if (line.empty()) line.Term(0.0, any_var());
  line.End();

  out << "Subject To\n";
  int rows_written = 0;
  auto write_row = [&](const std::string& row_name, const std::vector<int>& vars,
                       const std::vector<double>& coefs, const char* op, double rhs) {
    ++rows_written;
    line.Start(" " + row_name + ": ");
    for (std::size_t k = 0; k < vars.size(); ++k) line.Term(coefs[k], var_names[vars[k]]);
    if (line.empty()) line.Term(0.0, any_var());
    line.Put(std::string(" ") + op + " " + FormatNumber(rhs));
    line.End();
  };
  for (int i = 0; i < num_constraints(); ++i) {
    const RowData& row = constraint(i);
    const bool has_lower = row.lower > -kInf;
    const bool has_upper = row.upper < kInf;
    if (has_lower && has_upper && row.lower == row.upper) {
      write_row(names.Make(row.name), row.vars, row.coefs, "=", row.lower);
    } else if (has_lower && has_upper) {
      write_row(names.Make(row.name + "_lo"), row.vars, row.coefs, ">=", row.lower);
      write_row(names.Make(row.name + "_hi"), row.vars, row.coefs, "<=", row.upper);
    } else if (has_lower) {
      write_row(names.Make(row.name), row.vars, row.coefs, ">=", row.lower);
    } else if (has_upper) {
      write_row(names.Make(row.name), row.vars, row.coefs, "<=", row.upper);
    } else {
      out << " \\ constraint " << row.name << " is free (no finite bound) and omitted\n";
    }
  }
  rows_written += static_cast<int>(3 * pwl.size());
  if (rows_written == 0) {
    // GLPK's reader (glp_read_lp) refuses a constraints section without a row (found by
    // tests/fuzz/fuzz_lp_roundtrip on the empty model): write one that always holds.
    if (zero_var.empty()) zero_var = names.Make("bft_zero");
    line.Start(" " + names.Make("bft_no_rows") + ": ");
    line.Term(1.0, zero_var);
    line.Put(" >= 0");
    line.End();
  }
  for (std::size_t p = 0; p < pwl.size(); ++p) {
    const PiecewiseLinearData& f = pwl[p];
    const std::size_t n = f.xs.size();
    line.Start(" " + names.Make(f.name + "_sum") + ": ");
    for (std::size_t k = 0; k < n; ++k) line.Term(1.0, weight_names[p][k]);
    line.Put(" = 1");
    line.End();
    for (int axis = 0; axis < 2; ++axis) {
      const auto& values = axis == 0 ? f.xs : f.ys;
      line.Start(" " + names.Make(f.name + (axis == 0 ? "_x" : "_y")) + ": ");
      line.Term(1.0, var_names[static_cast<std::size_t>(axis == 0 ? f.x : f.y)]);
      for (std::size_t k = 0; k < n; ++k) {
        if (values[k] != 0.0) line.Term(-values[k], weight_names[p][k]);
      }
      line.Put(" = 0");
      line.End();
    }
  }

  out << "Bounds\n";
  std::vector<std::string> generals;
  std::vector<std::string> binaries;
  for (int j = 0; j < num_vars(); ++j) {
    const VarData& v = var(j);
    const std::string& n = var_names[static_cast<std::size_t>(j)];
    if (v.type == VarType::kBinary && v.lower == 0.0 && v.upper == 1.0) {
      binaries.push_back(n);
      continue;
    }
    if (v.type != VarType::kContinuous) generals.push_back(n);
    if (v.lower == -kInf && v.upper == kInf) {
      out << " " << n << " free\n";
    } else if (v.lower == v.upper) {
      out << " " << n << " = " << FormatNumber(v.lower) << "\n";
    } else if (v.upper == kInf) {
      out << " " << n << " >= " << FormatNumber(v.lower) << "\n";
    } else {
      out << " " << FormatNumber(v.lower) << " <= " << n << " <= " << FormatNumber(v.upper) << "\n";
    }
  }
  for (const auto& weights : weight_names) {
    for (const auto& w : weights) out << " 0 <= " << w << " <= 1\n";
  }
  if (!zero_var.empty()) out << " " << zero_var << " = 0\n";
  if (!generals.empty()) {
    out << "Generals\n";
    for (const auto& n : generals) out << " " << n << "\n";
  }
  if (!binaries.empty()) {
    out << "Binaries\n";
    for (const auto& n : binaries) out << " " << n << "\n";
  }
  if (!pwl.empty()) {
    out << "SOS\n";
    for (std::size_t p = 0; p < pwl.size(); ++p) {
      line.Start(" " + names.Make(pwl[p].name + "_sos2") + ": S2::");
      for (std::size_t k = 0; k < weight_names[p].size(); ++k) {
        line.Put(" " + weight_names[p][k] + ":" + std::to_string(k + 1));
      }
      line.End();
    }
  }
  out << "End\n";
  return out.str();
}

void Model::WriteLp(const std::string& path) const {
  const std::string text = ToLpString();
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error("WriteLp: cannot open " + path + " for writing");
  file << text;
  file.close();
  if (!file) throw Error("WriteLp: failed writing " + path);
}

}  // namespace bft::milp
