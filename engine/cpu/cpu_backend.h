// The cpu backend: kernels/ref on fp32 activations and fp32 (dequantized)
// weights. It is the reference every other backend is compared with, and
// what CI runs. Caches default to fp32 (--kv-cache-dtype auto); the bf16
// and FP8 formats the cuda backend uses are stored and read back through
// kernels/ref's codecs, in the same byte layout (engine/cache_formats.h).
#ifndef SPAR_ENGINE_CPU_CPU_BACKEND_H_
#define SPAR_ENGINE_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"

#include "engine/backend.h"

namespace spar {

std::unique_ptr<Backend> CreateCpuBackend();

// One rank of a tensor-parallel group: the all-reduces go through `group`
// (threads of this process sharing an InProcessGroup, or processes joined by
// a SocketGroup; group->size() == tp.size).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(TpRank tp, std::shared_ptr<CpuGroup> group);

}  // namespace spar

#endif  // SPAR_ENGINE_CPU_CPU_BACKEND_H_
