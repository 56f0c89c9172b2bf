// Declarations shared by the binding translation units of bft._core.
#pragma once

#if __has_include(<pybind11/native_enum.h>)
#include <pybind11/native_enum.h>
#endif
#include <pybind11/pybind11.h>

#include <functional>
#include <initializer_list>
#include <utility>

namespace bft::python {

// Binds a C++ enum as a Python enum.Enum where pybind11 can (3.x), else as a pybind11 enum.
template <typename E>
void BindEnum(pybind11::module_& m, const char* name, const char* doc,
              std::initializer_list<std::pair<const char*, E>> values) {
#if PYBIND11_VERSION_MAJOR >= 3
  pybind11::native_enum<E> e(m, name, "enum.Enum", doc);
  for (const auto& [n, v] : values) e.value(n, v);
  e.finalize();
#else
  pybind11::enum_<E> e(m, name, doc);
  for (const auto& [n, v] : values) e.value(n, v);
#endif
}

// Makes Ctrl-C stop long C++ calls. While a scope is alive on the main thread (made with the GIL
// held), SIGINT also sets a flag that the call polls through milp::SolveOptions::interrupt (Poll())
// and between replay events; Python's own handler still runs (chained), so the call returns early
// and ThrowIfSignalled() then raises KeyboardInterrupt. Scopes nest; on other threads they do
// nothing (Python handles signals on the main thread only), nor where SIGINT is ignored (nohup).
class SigintScope {
 public:
  SigintScope();
  ~SigintScope();
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;
  static bool Requested();
  static std::function<bool()> Poll();

 private:
  bool counted_ = false;
  bool installed_ = false;
};

// With the GIL held: raises the pending Python exception (KeyboardInterrupt after Ctrl-C), if any.
void ThrowIfSignalled();

void BindMilp(pybind11::module_& m);
void BindCurve(pybind11::module_& m);
void BindJobs(pybind11::module_& m);
void BindAlloc(pybind11::module_& m);
void BindSim(pybind11::module_& m);
}  // namespace bft::python
