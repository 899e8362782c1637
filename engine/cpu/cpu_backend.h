// The cpu backend: kernels/ref on fp32 activations and fp32 (dequantized)
// weights. It is the reference every other backend is compared with, and
// what CI runs. Caches default to fp32; bf16/FP8 layouts can be chosen to
// reproduce what the cuda backend stores.
#ifndef SPAR_ENGINE_CPU_CPU_BACKEND_H_
#define SPAR_ENGINE_CPU_CPU_BACKEND_H_

#include <memory>

#include "engine/backend.h"

namespace spar {

std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace spar

#endif  // SPAR_ENGINE_CPU_CPU_BACKEND_H_
