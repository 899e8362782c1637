// What the launchers' work planners need to know about the current GPU, read
// once per device and cached: the planners run on every launch, and a driver
// query per launch (three per sparse-MLA layer, two per GEMM) is host time a
// decode step does not have.
#ifndef SPAR_KERNELS_CUDA_COMMON_DEVICE_INFO_H_
#define SPAR_KERNELS_CUDA_COMMON_DEVICE_INFO_H_

#include "kernels/cuda/common/smem_residency.h"

namespace spar {

struct DeviceInfo {
  int sm_count = 108;            // multiprocessors (A100: 108, H200: 132)
  int smem_per_sm = 164 * 1024;  // shared memory per multiprocessor, bytes (SPAR_SMEM_PER_SM_KB
                                 // when smaller: smem_residency.h)
  SmemFigures smem;              // the GPU's own shared-memory figures (all zero when unknown)
};

// The current device's figures (cudaGetDevice), cached per device; the A100
// figures when the device cannot be queried. Thread-safe.
DeviceInfo CurrentDeviceInfo();

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_COMMON_DEVICE_INFO_H_
