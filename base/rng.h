// Deterministic random numbers that give the same bits on every machine:
// SplitMix64 only, no std:: distributions (their outputs are
// implementation-defined) and no transcendental functions. SplitMix64 and
// CounterUniform are also the device code's (kernels/cuda/sampling).
#ifndef SPAR_BASE_RNG_H_
#define SPAR_BASE_RNG_H_

#include <cstdint>

#include "base/host_device.h"

namespace spar {

// One SplitMix64 step: a bijective 64-bit mixer, also usable as a hash.
SPAR_HOST_DEVICE constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // The SplitMix64 generator: the mixer of the state after each increment.
  uint64_t NextU64() {
    const uint64_t z = state_;
    state_ += 0x9e3779b97f4a7c15ull;
    return SplitMix64(z);
  }

  // Uniform in [0, 1) with 24 random bits: exact in float.
  float Uniform() { return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f); }

  // Uniform in [-1, 1).
  float Symmetric() { return Uniform() * 2.0f - 1.0f; }

  // Uniform in [0, 1) with 53 random bits.
  double UniformDouble() { return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0); }

  // Uniform integer in [0, n), n > 0 (tiny modulo bias is irrelevant here).
  uint64_t Below(uint64_t n) { return NextU64() % n; }

 private:
  uint64_t state_;
};

// Counter-based uniform in [0, 1) for (seed, stream, counter): what the
// sampler uses so that any backend draws the same number for a request step.
SPAR_HOST_DEVICE constexpr double CounterUniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  const uint64_t h = SplitMix64(seed ^ SplitMix64(stream ^ SplitMix64(counter)));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace spar

#endif  // SPAR_BASE_RNG_H_
