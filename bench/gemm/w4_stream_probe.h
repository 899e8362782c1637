// w4a16_bench --probe: the W4A16 streaming kernel's weight reads without its
// arithmetic, in its order, interleaved across a block's warps, uncapped and
// as a plain stream (w4_stream_probe.cu says what each tells).
#ifndef SPAR_BENCH_GEMM_W4_STREAM_PROBE_H_
#define SPAR_BENCH_GEMM_W4_STREAM_PROBE_H_

#include <cuda_runtime.h>

namespace spar::bench {

// Prints one line per probe and shape: µs, GB/s and % of `copy_gbs` (read +
// written). Work runs on `stream` (non-legacy).
void RunW4StreamProbes(double copy_gbs, cudaStream_t stream);

}  // namespace spar::bench

#endif  // SPAR_BENCH_GEMM_W4_STREAM_PROBE_H_
