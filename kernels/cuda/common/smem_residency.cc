#include "kernels/cuda/common/smem_residency.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>

namespace spar {
namespace {

constexpr int kMaxDevices = 64;

int64_t ReadEmulatedSmem() {
  const char* v = std::getenv("SPAR_SMEM_PER_SM_KB");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long kb = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || kb <= 0 || kb > (int64_t{1} << 20)) return 0;
  return static_cast<int64_t>(kb) * 1024;
}

// The current device's figures, cached per device (all zero when it cannot
// be queried: emulation then stays off).
SmemFigures CurrentFigures() {
  struct Cached {
    std::atomic<int64_t> per_sm{0};
    std::atomic<int64_t> reserved{0};
    std::atomic<int64_t> max_per_block{0};
  };
  static Cached cache[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return {};
  }
  Cached& c = cache[dev];
  if (c.per_sm.load(std::memory_order_acquire) == 0) {
    int per_sm = 0, reserved = 0, max_block = 0;
    if (cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    c.reserved.store(reserved, std::memory_order_relaxed);
    c.max_per_block.store(max_block, std::memory_order_relaxed);
    c.per_sm.store(per_sm, std::memory_order_release);
  }
  return {c.per_sm.load(std::memory_order_acquire), c.reserved.load(std::memory_order_relaxed),
          c.max_per_block.load(std::memory_order_relaxed)};
}

}  // namespace

int64_t SmemForResidency(int64_t smem_bytes, const SmemFigures& real, int64_t emulated_per_sm) {
  if (emulated_per_sm <= 0 || real.per_sm <= emulated_per_sm) return smem_bytes;
  const int64_t fit = emulated_per_sm / (smem_bytes + real.reserved_per_block);  // blocks an emulated SM holds
  if (fit < 1) return -1;
  // The least request for which fit + 1 blocks overflow the real SM:
  // (fit + 1) x (bytes + reserved) > per_sm.
  int64_t bytes = real.per_sm / (fit + 1) - real.reserved_per_block + 1;
  if (bytes < smem_bytes) bytes = smem_bytes;
  bytes = (bytes + 15) / 16 * 16;
  if (real.max_per_block > 0 && bytes > real.max_per_block) bytes = real.max_per_block;
  return bytes < smem_bytes ? smem_bytes : bytes;
}

int64_t EmulatedSmemPerSm() {
  static const int64_t bytes = ReadEmulatedSmem();
  return bytes;
}

int64_t LaunchSmemBytes(int64_t smem_bytes) {
  const int64_t emulated = EmulatedSmemPerSm();
  if (emulated <= 0) return smem_bytes;
  return SmemForResidency(smem_bytes, CurrentFigures(), emulated);
}

}  // namespace spar
