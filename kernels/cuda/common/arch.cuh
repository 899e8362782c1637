// Included by every spar .cu file. The sm80 rule: device code is compiled
// from the compute_80 virtual architecture only (cmake/SparCuda.cmake), so
// an H100/H200 runs exactly the code an A100 runs. This guard makes any other
// device pass a build error, so no Hopper path can slip in by accident.
#ifndef SPAR_KERNELS_CUDA_COMMON_ARCH_CUH_
#define SPAR_KERNELS_CUDA_COMMON_ARCH_CUH_

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 800
#error "spar device code must be compiled from compute_80 only (see cmake/SparCuda.cmake)"
#endif

#endif  // SPAR_KERNELS_CUDA_COMMON_ARCH_CUH_
