// Hidden states on the wire (v1::Activation) between pipeline stages and
// from a stage leader to its tensor-parallel peers.
//
// The encoder picks the narrowest lossless dtype: BF16 when every value is
// exactly a bf16 (what the cuda backend's bf16 activations always are: half
// the bytes of a 4096-token prefill chunk, ~50 MB at GLM-5 size, per hop),
// F32 otherwise (the cpu backend's fp32 activations, bit-identical to one
// process). The decoder accepts both and checks every size against the
// message, so a hostile or corrupt message is an error, never a crash.
#ifndef SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_
#define SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_

#include "absl/status/status.h"
#include "services/worker/stage_executor.h"
#include "spar/v1/worker.pb.h"

namespace spar {

// Writes `in` into `out` (dtype, shape, bytes); returns the payload size.
size_t EncodeActivation(const Activations& in, v1::Activation* out);

// Reads `in` into `out` as fp32 values.
absl::Status DecodeActivation(const v1::Activation& in, Activations* out);

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_
