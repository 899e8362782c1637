// SPAR_HOST_DEVICE marks the few base/ functions that CUDA kernels call too
// (the counter-based sampler draw must give the same bits on the CPU and
// the GPU), so there is one definition of each instead of a device copy.
#ifndef SPAR_BASE_HOST_DEVICE_H_
#define SPAR_BASE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define SPAR_HOST_DEVICE __host__ __device__
#else
#define SPAR_HOST_DEVICE
#endif

#endif  // SPAR_BASE_HOST_DEVICE_H_
