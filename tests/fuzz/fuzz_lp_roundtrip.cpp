// libFuzzer target: the CPLEX-LP writer. Bytes drive the construction of a model (variables of
// every kind and bound, rows, an objective; invalid input must throw InvalidArgument, and nothing
// else); its LP text must always be read back by GLPK's glp_read_lp.
#include <glpk.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bft/milp.h"

namespace milp = bft::milp;

namespace {

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  std::uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  double Number() {  // small integers, fractions, zero, infinities and extremes
    const std::uint8_t b = Byte();
    switch (b % 8) {
      case 0:
        return 0.0;
      case 1:
        return milp::kInf;
      case 2:
        return -milp::kInf;
      case 3:
        return (Byte() % 41) - 20.0;
      case 4:
        return ((Byte() % 41) - 20.0) / 4.0;
      case 5:
        return std::ldexp(1.0, (Byte() % 200) - 100);
      default:
        return static_cast<double>(Byte()) - 128.0;
    }
  }
  std::string Name() {
    std::string s;
    const int n = Byte() % 6;
    for (int k = 0; k < n; ++k) s.push_back(static_cast<char>(Byte() % 95 + 32));
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  milp::Model m("fuzz");
  std::vector<milp::Var> vars;
  while (!in.empty()) {
    try {
      switch (in.Byte() % 4) {
        case 0: {
          const auto type = static_cast<milp::VarType>(in.Byte() % 3);
          const double lo = in.Number(), hi = in.Number();
          vars.push_back(type == milp::VarType::kBinary ? m.AddBinary(in.Name())
                                                        : m.AddVar(lo, hi, type, in.Name()));
          break;
        }
        case 1:
        case 2: {
          if (vars.empty()) break;
          milp::LinExpr e;
          const int terms = in.Byte() % 4 + 1;
          for (int k = 0; k < terms; ++k) e.AddTerm(vars[in.Byte() % vars.size()], in.Number());
          m.AddConstraint(e, in.Number(), in.Number(), in.Name());
          break;
        }
        default: {
          if (vars.empty()) break;
          milp::LinExpr e(in.Number());
          e.AddTerm(vars[in.Byte() % vars.size()], in.Number());
          m.SetObjective(e, in.Byte() % 2 ? milp::Sense::kMaximize : milp::Sense::kMinimize);
        }
      }
    } catch (const bft::InvalidArgument&) {
      // refused input; the model stays valid
    }
  }
  const std::string text = m.ToLpString();
  char path[] = "/tmp/bft_fuzz_lp_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 0;
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  close(fd);
  glp_term_out(GLP_OFF);
  glp_prob* prob = glp_create_prob();
  const int ret = glp_read_lp(prob, nullptr, path);
  std::remove(path);
  if (ret != 0) {
    std::fprintf(stderr, "GLPK cannot read the LP text:\n%s\n", text.c_str());
    std::abort();
  }
  glp_delete_prob(prob);
  return 0;
}
