// Helpers shared by the engine tests.
#ifndef SPAR_TESTS_ENGINE_TEST_UTIL_H_
#define SPAR_TESTS_ENGINE_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/rng.h"
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

// Directories TempDir made, removed when the process that made them exits
// (a forked child's exit leaves them alone); SPAR_KEEP_TEST_DIRS=1 keeps
// them for debugging. Without this every run left tens of MB of checkpoints
// in /tmp: thousands of runs filled a 250 GB disk.
struct TempDirRegistry {
  pid_t owner = ::getpid();
  std::vector<std::string> dirs;
  ~TempDirRegistry() {
    if (::getpid() != owner || std::getenv("SPAR_KEEP_TEST_DIRS") != nullptr) return;
    for (const auto& d : dirs) std::system(("rm -rf '" + d + "'").c_str());
  }
};
inline TempDirRegistry& TempDirs() {
  static TempDirRegistry registry;
  return registry;
}

// A fresh empty directory under the test temp dir.
inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/spar_test_" + name + "_" + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  TempDirs().dirs.push_back(dir);
  return dir;
}

// `n` token ids of the tiny models' byte vocabulary (ids below 288), seeded.
inline std::vector<int32_t> RandomTokens(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = static_cast<int32_t>(rng.Below(288));
  return ids;
}

// max |got - ref| / max |ref| over a row; infinite when `got` is not finite.
inline double RelErr(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, scale = 0;
  for (size_t v = 0; v < ref.size(); ++v) {
    if (!std::isfinite(got[v])) return INFINITY;
    err = std::max(err, std::fabs(double(got[v]) - ref[v]));
    scale = std::max(scale, std::fabs(double(ref[v])));
  }
  return err / scale;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_TEST_UTIL_H_
