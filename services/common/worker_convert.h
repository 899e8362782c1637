// Conversions between the micro-batch domain types (micro_batch.h) and
// spar.v1 worker.proto. Parsing validates structure and ranges and names
// the offending field; plan semantics (block tables against positions, ids
// against the vocabulary) are checked by StepPlan::Finalize on the worker.
#ifndef SPAR_SERVICES_COMMON_WORKER_CONVERT_H_
#define SPAR_SERVICES_COMMON_WORKER_CONVERT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "services/common/micro_batch.h"
#include "spar/v1/worker.pb.h"

namespace spar {

// The plan part of a MicroBatch (no activations).
void PlanToProto(const MicroBatchPlan& plan, uint64_t epoch, v1::MicroBatch* out);
absl::StatusOr<MicroBatchPlan> PlanFromProto(const v1::MicroBatch& in);

void ResultToProto(const MicroBatchResult& result, uint64_t epoch, v1::MicroBatchResult* out);
MicroBatchResult ResultFromProto(const v1::MicroBatchResult& in);

void SamplingToProto(const SequenceSampling& s, v1::SamplingState* out);
absl::StatusOr<SequenceSampling> SamplingFromProto(const v1::SamplingState& in);

void ErrorToProto(const absl::Status& status, int stage, v1::ErrorStatus* out);
absl::Status ErrorFromProto(const v1::ErrorStatus& error);

// Largest top_logprobs the API and the workers accept.
inline constexpr int kMaxTopLogprobs = 20;

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_WORKER_CONVERT_H_
