// alloc::NodeNames: scheduler node names <-> the allocator's NodeIds (bft/alloc.h).
#include <string>

#include "bft/alloc.h"

namespace bft::alloc {

NodeId NodeNames::Intern(const std::string& name) {
  if (const auto it = ids_.find(name); it != ids_.end()) return it->second;
  if (name.empty()) throw InvalidArgument("node name: must not be empty");
  if (name.find('\0') != std::string::npos) throw InvalidArgument("node name: must not hold a NUL byte");
  const auto id = static_cast<NodeId>(names_.size());
  names_.push_back(name);
  ids_.emplace(name, id);
  return id;
}

NodeId NodeNames::Find(const std::string& name) const {
  const auto it = ids_.find(name);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& NodeNames::Name(NodeId id) const {
  if (id < 0 || id >= static_cast<NodeId>(names_.size()))
    throw InvalidArgument("node id " + std::to_string(id) + " has no name (" + std::to_string(names_.size()) +
                          " names)");
  return names_[static_cast<std::size_t>(id)];
}

}  // namespace bft::alloc
