// Blocks of one grid handing data to each other through global memory: a
// counter every block arrives on, the blocks' writes before their arrival
// visible to the block(s) that see the count complete.
//
// One thread of each block does the arrival, after a block barrier: the
// barrier orders the block's writes before that thread's, and a release at
// GPU scope is cumulative (PTX memory model), so one thread's release
// publishes the whole block's writes, as a cooperative group's grid sync
// does. The arrival is one atom.add.acq_rel.gpu (SASS: MEMBAR.ALL.GPU, the
// atomic, CCTL.IVALL). The pattern it replaces, __threadfence() in every
// thread then a relaxed atomicAdd, is a MEMBAR.SC.GPU per thread: a
// sequentially consistent fence, stronger than a handoff needs.
#ifndef SPAR_KERNELS_CUDA_COMMON_GRID_ARRIVAL_CUH_
#define SPAR_KERNELS_CUDA_COMMON_GRID_ARRIVAL_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

namespace spar::cuda {

// Adds v to *p and returns the old value; a release of this thread's
// (cumulatively: its block's, after a barrier) earlier writes and an acquire
// of the writes released by the arrivals it follows.
__device__ __forceinline__ uint32_t AtomicAddAcqRelGpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ uint32_t LoadAcquireGpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Call with every thread of the block, after its writes for the others.
// Arrives on *counter once for the block; true in every thread of the block
// whose arrival is the `arrivals`-th (that block then sees every arrived
// block's writes; read them with __ldcg or plain loads). The counter is left
// as it is: the last block resets it (a plain store) when the counter is
// reused. is_last: a shared int the block's threads read the answer from.
__device__ __forceinline__ bool ArriveIsLast(uint32_t* counter, uint32_t arrivals, int& is_last) {
  __syncthreads();
  if (threadIdx.x == 0) is_last = AtomicAddAcqRelGpu(counter, 1u) == arrivals - 1u;
  __syncthreads();
  return is_last != 0;
}
__device__ __forceinline__ bool ArriveIsLast(int32_t* counter, int32_t arrivals, int& is_last) {
  return ArriveIsLast(reinterpret_cast<uint32_t*>(counter), static_cast<uint32_t>(arrivals), is_last);
}

// Call with every thread of the block. Arrives on *counter and waits until
// it reaches `target` (every block of the grid resident: a cooperative
// launch); every arrived block's earlier writes are then visible here.
__device__ __forceinline__ void ArriveAndWait(uint32_t* counter, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    AtomicAddAcqRelGpu(counter, 1u);
    while (LoadAcquireGpu(counter) < target) {
    }
  }
  __syncthreads();
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_GRID_ARRIVAL_CUH_
