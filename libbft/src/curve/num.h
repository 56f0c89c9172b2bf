// A number in the curve capability's messages, as an ostream prints it (6 significant digits), so
// that the fit and the profiling advisor word their errors alike.
#pragma once

#include <sstream>
#include <string>

namespace bft::curve::internal {

inline std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace bft::curve::internal
