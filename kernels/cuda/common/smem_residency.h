// Running a smaller GPU's shared memory per multiprocessor on a bigger one,
// so that benchmarks on the test GPUs keep as few blocks resident as the
// GPUs spar is built for.
//
// Why: spar's kernels are sm80 code for the A100 (164 KB of shared memory an
// SM), and are timed on H100 / H200s running that code (228 KB). A tile with
// 96 KB of stages runs two blocks an SM there and one on an A100 (the
// W8A16 T64R4W2F tile: the prefill MoE's gate/up and the dense GEMMs of 64
// tokens), so a plan tuned on the test GPU can rest on latency hiding the
// A100 does not have. With SPAR_SMEM_PER_SM_KB set (164: an A100), every
// launch through cuda::LaunchWithSmem asks for enough dynamic shared memory
// that no more of its blocks fit an SM than would fit one of that size, and
// CurrentDeviceInfo() reports that size to the planners. Only shared memory
// is emulated: the SM count, L1 and L2 sizes and bandwidths stay the test
// GPU's, and kernels launched without LaunchWithSmem keep their residency.
#ifndef SPAR_KERNELS_CUDA_COMMON_SMEM_RESIDENCY_H_
#define SPAR_KERNELS_CUDA_COMMON_SMEM_RESIDENCY_H_

#include <cstdint>

namespace spar {

// The shared memory figures of one multiprocessor (bytes).
struct SmemFigures {
  int64_t per_sm = 0;          // what an SM holds (A100: 167936, H100 / H200: 233472)
  int64_t reserved_per_block = 0;  // the system's share of each block (1024 on sm80+)
  int64_t max_per_block = 0;   // the most dynamic shared memory a block may ask for (opt-in)
};

// The dynamic shared memory a launch of `smem_bytes` a block asks for on a
// GPU of `real` figures so that at most as many of its blocks fit an SM as
// fit one of `emulated_per_sm` bytes: smem_bytes itself when emulation is off
// (emulated_per_sm <= 0) or the real SM is no bigger; -1 when not even one
// block would fit the emulated SM (the launch would fail there). Rounded up
// to 16 bytes; at most real.max_per_block (one block an SM then). Pure.
int64_t SmemForResidency(int64_t smem_bytes, const SmemFigures& real, int64_t emulated_per_sm);

// SPAR_SMEM_PER_SM_KB x 1024, read once per process (0: unset; a value that
// is not a positive integer counts as unset).
int64_t EmulatedSmemPerSm();

// SmemForResidency for the current device (CurrentDeviceInfo().smem) and the
// process's EmulatedSmemPerSm(). Thread-safe.
int64_t LaunchSmemBytes(int64_t smem_bytes);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_COMMON_SMEM_RESIDENCY_H_
