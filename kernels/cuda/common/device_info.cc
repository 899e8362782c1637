#include "kernels/cuda/common/device_info.h"

#include <cuda_runtime.h>

#include <atomic>

#include "kernels/cuda/common/smem_residency.h"

namespace spar {
namespace {

constexpr int kMaxDevices = 64;

struct CachedInfo {
  std::atomic<int> sm_count{0};
  std::atomic<int> smem_per_sm{0};
};

}  // namespace

DeviceInfo CurrentDeviceInfo() {
  static CachedInfo cache[kMaxDevices];
  DeviceInfo info;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return info;
  }
  CachedInfo& c = cache[dev];
  const int sms = c.sm_count.load(std::memory_order_acquire);
  if (sms > 0) {
    info.sm_count = sms;
    info.smem_per_sm = c.smem_per_sm.load(std::memory_order_acquire);
    return info;
  }
  int n = 0, smem = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0 ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess || smem <= 0) {
    cudaGetLastError();
    return info;
  }
  const int64_t emulated = EmulatedSmemPerSm();
  if (emulated > 0 && emulated < smem) smem = static_cast<int>(emulated);
  c.smem_per_sm.store(smem, std::memory_order_release);
  c.sm_count.store(n, std::memory_order_release);
  info.sm_count = n;
  info.smem_per_sm = smem;
  return info;
}

}  // namespace spar
