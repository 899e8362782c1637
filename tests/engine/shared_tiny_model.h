// A make-tiny checkpoint written once per test binary: test files that all
// want "the tiny model" share one directory per name instead of each keeping
// its own lazily-built copy.
#ifndef SPAR_TESTS_ENGINE_SHARED_TINY_MODEL_H_
#define SPAR_TESTS_ENGINE_SHARED_TINY_MODEL_H_

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>

#include "engine/make_tiny.h"
#include "tests/engine/test_util.h"

namespace spar::testing {

// The checkpoint `options` describes, written to TempDir(name) (removed when
// the process exits) on the first call for `name`; later calls with that
// name return the same directory without looking at their options.
inline const std::string& SharedTinyModel(const std::string& name, MakeTinyOptions options) {
  static std::mutex mu;
  static auto* dirs = new std::map<std::string, std::string>();  // never destroyed: outlives static users
  std::lock_guard<std::mutex> lock(mu);
  auto it = dirs->find(name);
  if (it == dirs->end()) {
    options.out_dir = TempDir(name);
    const absl::Status st = MakeTinyModel(options);
    EXPECT_TRUE(st.ok()) << name << ": " << st;
    it = dirs->emplace(name, options.out_dir).first;
  }
  return it->second;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_SHARED_TINY_MODEL_H_
