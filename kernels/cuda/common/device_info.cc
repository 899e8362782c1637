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
  std::atomic<int> hw_smem_per_sm{0};
  std::atomic<int> smem_reserved_per_block{0};
  std::atomic<int> smem_max_per_block{0};
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
    info.smem = {c.hw_smem_per_sm.load(std::memory_order_relaxed), c.smem_reserved_per_block.load(std::memory_order_relaxed),
                 c.smem_max_per_block.load(std::memory_order_relaxed)};
    return info;
  }
  int n = 0, smem = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0 ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess || smem <= 0) {
    cudaGetLastError();
    return info;
  }
  // What residency emulation needs (smem_residency.h): left zero, and the
  // emulation off, when the driver cannot say.
  int reserved = 0, max_block = 0;
  if (cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
  } else {
    info.smem = {smem, reserved, max_block};
  }
  const int64_t emulated = EmulatedSmemPerSm();
  const int planned = emulated > 0 && emulated < smem ? static_cast<int>(emulated) : smem;
  // Every field before sm_count, which publishes them.
  c.hw_smem_per_sm.store(static_cast<int>(info.smem.per_sm), std::memory_order_relaxed);
  c.smem_reserved_per_block.store(static_cast<int>(info.smem.reserved_per_block), std::memory_order_relaxed);
  c.smem_max_per_block.store(static_cast<int>(info.smem.max_per_block), std::memory_order_relaxed);
  c.smem_per_sm.store(planned, std::memory_order_release);
  c.sm_count.store(n, std::memory_order_release);
  info.sm_count = n;
  info.smem_per_sm = planned;
  return info;
}

}  // namespace spar
