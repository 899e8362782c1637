// Hidden states on the wire (v1::Activation) between pipeline stages and
// from a stage leader to its tensor-parallel peers.
//
// The encoder sends BF16 activations (the cuda backend's) as their bytes,
// with no conversion on the host (half the bytes of fp32: ~50 MB less per
// hop for a 4096-token prefill chunk at GLM-5 size), and F32 activations (the
// cpu backend's) as BF16 only when every value is exactly a bf16, else as
// F32, bit-identical to one process. The decoder keeps the wire's dtype (the
// receiving backend converts only if it computes in the other one) and
// checks every size against the message, so a hostile or corrupt message is
// an error, never a crash.
#ifndef SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_
#define SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_

#include "absl/status/status.h"
#include "services/worker/stage_executor.h"
#include "spar/v1/worker.pb.h"

namespace spar {

// Writes `in` into `out` (dtype, shape, bytes); returns the payload size.
size_t EncodeActivation(const Activations& in, v1::Activation* out);

// Reads `in` into `out` in the wire's dtype.
absl::Status DecodeActivation(const v1::Activation& in, Activations* out);

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_ACTIVATION_CODEC_H_
