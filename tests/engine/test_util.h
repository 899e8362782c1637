// Helpers shared by the engine tests.
#ifndef SPAR_TESTS_ENGINE_TEST_UTIL_H_
#define SPAR_TESTS_ENGINE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/mapped_file.h"
#include "gtest/gtest.h"

namespace spar::testing {

// The source tree: SPAR_SOURCE_DIR from the environment (tests run on another
// machine, e.g. a GPU host with a copy of the tree), else the build's.
inline std::string SourcePath(const std::string& rel) {
  const char* env = std::getenv("SPAR_SOURCE_DIR");
  return std::string(env != nullptr ? env : SPAR_SOURCE_DIR) + "/" + rel;
}

inline std::string ReadSource(const std::string& rel) {
  auto text = ReadFileToString(SourcePath(rel));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

// A fresh empty directory under the test temp dir.
inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/spar_test_" + name + "_" + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_TEST_UTIL_H_
