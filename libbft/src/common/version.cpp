#include "bft/version.h"

namespace bft {
const char* Version() { return "0.1.0"; }
}  // namespace bft
