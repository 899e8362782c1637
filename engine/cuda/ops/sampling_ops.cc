#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/sampling/sampling.h"

namespace spar::cuda_ops {

absl::StatusOr<std::vector<SampleResult>> Sample(StepContext& ctx, const Tensor& logits,
                                                 const std::vector<SampleRequest>& requests) {
  if (logits.dtype() != DType::kF32) return absl::InvalidArgumentError("sample: logits must be fp32");
  const int rows = static_cast<int>(requests.size());
  if (rows != logits.rows()) return absl::InvalidArgumentError("sample: one request per logits row");
  if (rows == 0) return std::vector<SampleResult>();
  int top_n = 0;
  std::vector<SamplingRowParams> params(rows);
  std::vector<int32_t> offsets = {0}, ids, pc, oc;
  for (int r = 0; r < rows; ++r) {
    const auto& q = requests[r];
    params[r] = SamplingRowParams{q.params, q.step};
    top_n = std::max(top_n, q.top_logprobs);
    if (q.history != nullptr) {
      std::map<int32_t, std::pair<int, int>> merged;
      for (const auto& [id, n] : q.history->prompt_counts) merged[id].first = n;
      for (const auto& [id, n] : q.history->output_counts) merged[id].second = n;
      for (const auto& [id, c] : merged) {
        ids.push_back(id);
        pc.push_back(c.first);
        oc.push_back(c.second);
      }
    }
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  // Stream-ordered temporaries (a cudaMalloc/cudaFree pair per step would
  // synchronise the device); pageable uploads are staged at once.
  std::vector<int32_t> hist = offsets;
  hist.insert(hist.end(), ids.begin(), ids.end());
  hist.insert(hist.end(), pc.begin(), pc.end());
  hist.insert(hist.end(), oc.begin(), oc.end());
  const size_t ws = SampleWorkspaceBytes(rows, static_cast<int>(logits.cols()));
  SPAR_ASSIGN_OR_RETURN(
      Tensor d_params,
      ctx.Upload(params.data(), static_cast<int64_t>(params.size() * sizeof(SamplingRowParams)), DType::kU8));
  SPAR_ASSIGN_OR_RETURN(Tensor d_hist, ctx.Upload(hist.data(), static_cast<int64_t>(hist.size()), DType::kI32));
  // Token masks (constrained decoding), one bitset per row; rows without
  // one allow every id.
  const int64_t mask_words = (logits.cols() + 31) / 32;
  bool any_mask = false;
  for (const auto& q : requests) any_mask = any_mask || q.token_mask != nullptr;
  Tensor d_mask;
  std::vector<uint32_t> masks;  // alive until the stream synchronizes, as the other uploads
  if (any_mask) {
    masks.assign(static_cast<size_t>(rows) * mask_words, 0xffffffffu);
    for (int r = 0; r < rows; ++r) {
      if (requests[r].token_mask != nullptr) {
        std::memcpy(masks.data() + static_cast<size_t>(r) * mask_words, requests[r].token_mask, mask_words * 4);
      }
    }
    SPAR_ASSIGN_OR_RETURN(d_mask, ctx.Upload(masks.data(), static_cast<int64_t>(masks.size()), DType::kI32));
  }
  SPAR_ASSIGN_OR_RETURN(Tensor d_ws, ctx.NewTensor(1, static_cast<int64_t>(ws) + 16, DType::kU8));
  // out: tokens [rows], logprobs [rows], top ids [rows, n], top values [rows, n]
  SPAR_ASSIGN_OR_RETURN(Tensor d_out,
                        ctx.NewTensor(1, static_cast<int64_t>(rows) * (2 + 2 * top_n) + 4, DType::kI32));
  SampleParams sp;
  sp.logits = logits.as<float>();
  sp.logits_stride = logits.ld();
  sp.rows = rows;
  sp.vocab = static_cast<int>(logits.cols());
  sp.params = d_params.as<SamplingRowParams>();
  const int32_t* h = d_hist.as<int32_t>();
  sp.history_offsets = h;
  sp.history_ids = h + offsets.size();
  sp.history_prompt_counts = sp.history_ids + ids.size();
  sp.history_output_counts = sp.history_prompt_counts + ids.size();
  if (any_mask) {
    sp.token_mask = reinterpret_cast<const uint32_t*>(d_mask.as<int32_t>());
    sp.token_mask_stride = mask_words;
  }
  sp.workspace = d_ws.data();
  sp.workspace_bytes = ws;
  int32_t* o = d_out.as<int32_t>();
  sp.tokens = o;
  sp.token_logprobs = reinterpret_cast<float*>(o + rows);
  sp.top_logprobs = top_n;
  sp.top_logprob_ids = o + 2 * rows;
  sp.top_logprob_values = reinterpret_cast<float*>(o + 2 * rows + rows * top_n);
  SPAR_RETURN_IF_ERROR(LaunchSample(sp, ctx.stream));
  std::vector<int32_t> host(static_cast<size_t>(rows) * (2 + 2 * top_n));
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), o, host.size() * 4, cudaMemcpyDeviceToHost, ctx.stream));
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream));
  std::vector<SampleResult> out(rows);
  for (int r = 0; r < rows; ++r) {
    out[r].token = host[r];
    std::memcpy(&out[r].logprob, &host[rows + r], 4);
    for (int j = 0; j < requests[r].top_logprobs; ++j) {
      float v;
      std::memcpy(&v, &host[2 * rows + rows * top_n + r * top_n + j], 4);
      out[r].top.emplace_back(host[2 * rows + r * top_n + j], v);
    }
  }
  return out;
}

}  // namespace spar::cuda_ops
