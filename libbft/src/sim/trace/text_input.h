// The node-name rules every trace reader and importer shares, so that an importer checks its names
// exactly as the trace reader does.
#pragma once

#include <string>
#include <string_view>

namespace bft::sim::detail {

// True if `name` may name a node in a trace (non-empty; no space, comma, quote or control
// character); else false with the reason in *why.
bool ValidNodeName(std::string_view name, std::string* why);

}  // namespace bft::sim::detail
