// Locating ../shared/data (real traces and workloads) from C++ tests. Tests that need a file call
// BFT_REQUIRE_SHARED_DATA(path), which skips the test with a clear message when it is absent.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace bft::testing {
inline std::string SharedDataPath(const std::string& file) {
  return std::string(BFT_SHARED_DATA_DIR) + "/" + file;
}
}  // namespace bft::testing

#define BFT_REQUIRE_SHARED_DATA(path)                                                                        \
  do {                                                                                                       \
    if (!std::filesystem::exists(path))                                                                      \
      GTEST_SKIP() << "real data not found: " << (path) << " (expected ../shared/data beside the checkout)"; \
  } while (0)
