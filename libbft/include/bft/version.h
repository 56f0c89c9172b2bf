#pragma once

namespace bft {
// The library version, "MAJOR.MINOR.PATCH".
const char* Version();
}  // namespace bft
