// A fixed pool of worker threads for data-parallel loops in the CPU
// reference kernels. Size: SPAR_NUM_THREADS, else hardware concurrency.
#ifndef SPAR_BASE_THREAD_POOL_H_
#define SPAR_BASE_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace spar {

// Runs fn(begin, end) over [0, n) split into contiguous chunks of at least
// `min_chunk` items, on the shared pool; returns when all chunks are done.
// Safe to call from several threads; nested calls run inline.
void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

int NumWorkerThreads();

}  // namespace spar

#endif  // SPAR_BASE_THREAD_POOL_H_
