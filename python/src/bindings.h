// Declarations shared by the binding translation units of bft._core.
#pragma once

#if __has_include(<pybind11/native_enum.h>)
#include <pybind11/native_enum.h>
#endif
#include <pybind11/pybind11.h>

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

void BindMilp(pybind11::module_& m);
void BindCurve(pybind11::module_& m);
void BindAlloc(pybind11::module_& m);
void BindSim(pybind11::module_& m);
}  // namespace bft::python
