// The memory probes of gemm_bench --probe: what a pure weight stream and an
// empty launch cost on this GPU, the ceilings a decode GEMM is judged by.
#ifndef SPAR_BENCH_GEMM_MEMORY_PROBES_H_
#define SPAR_BENCH_GEMM_MEMORY_PROBES_H_

#include <cuda_runtime.h>

namespace spar::bench {

// Prints the read-only stream rate (75.5 MB rotated over 6 copies, and
// 1 GiB), the GEMM's 16-row access pattern without its arithmetic, and the
// cost of an empty launch in a graph and enqueued one by one; rates as %
// of `copy_gbs` (read + written). Work runs on `stream` (non-legacy).
void RunMemoryProbes(int sms, cudaStream_t stream, double copy_gbs);

}  // namespace spar::bench

#endif  // SPAR_BENCH_GEMM_MEMORY_PROBES_H_
