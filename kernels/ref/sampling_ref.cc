#include "kernels/ref/sampling_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/rng.h"

namespace spar::ref {
namespace {

double LogSumExp(const float* logits, int vocab) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return mx + std::log(sum);
}

int32_t Argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

void ApplyPenalties(float* logits, int vocab, const SamplingParams& p, const TokenHistory& h) {
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t id) {
      if (id < 0 || id >= vocab) return;
      logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
    };
    // A token seen in both prompt and output is penalised once.
    for (const auto& [id, n] : h.prompt_counts) penalize(id);
    for (const auto& [id, n] : h.output_counts) {
      if (!h.prompt_counts.count(id)) penalize(id);
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [id, n] : h.output_counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
    }
  }
}

bool MaskAllowsAFiniteLogit(const float* logits, int vocab, const uint32_t* mask) {
  for (int i = 0; i < vocab; ++i) {
    if (((mask[i >> 5] >> (i & 31)) & 1u) && logits[i] > -std::numeric_limits<float>::infinity()) return true;
  }
  return false;
}

void ApplyTokenMask(float* logits, int vocab, const uint32_t* mask) {
  if (mask == nullptr || !MaskAllowsAFiniteLogit(logits, vocab, mask)) return;
  for (int i = 0; i < vocab; ++i) {
    if (!((mask[i >> 5] >> (i & 31)) & 1u)) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

int32_t SampleToken(const float* raw, int vocab, const SamplingParams& p, const TokenHistory& history, uint64_t step,
                    const uint32_t* mask) {
  std::vector<float> logits(raw, raw + vocab);
  ApplyTokenMask(logits.data(), vocab, mask);
  ApplyPenalties(logits.data(), vocab, p, history);
  if (p.temperature <= 0.0f || p.top_k == 1) return Argmax(logits.data(), vocab);
  for (auto& l : logits) l /= p.temperature;
  const double lse = LogSumExp(logits.data(), vocab);
  std::vector<double> prob(vocab);
  for (int i = 0; i < vocab; ++i) prob[i] = std::exp(static_cast<double>(logits[i]) - lse);
  // Order by probability, ties to the lower id, to apply top-k and top-p.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b]; });
  int keep = vocab;
  if (p.top_k > 0) keep = std::min(keep, p.top_k);
  if (p.top_p < 1.0f) {
    double cum = 0;
    int n = 0;
    while (n < keep) {
      cum += prob[order[n]];
      ++n;
      if (cum >= p.top_p) break;
    }
    keep = std::max(1, n);
  }
  std::vector<bool> kept(vocab, false);
  for (int i = 0; i < keep; ++i) kept[order[i]] = true;
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob[order[0]];
    for (int i = 0; i < vocab; ++i) {
      if (prob[i] < floor) kept[i] = false;
    }
    kept[order[0]] = true;
  }
  double total = 0;
  for (int i = 0; i < vocab; ++i) {
    if (kept[i]) total += prob[i];
  }
  const double u = CounterUniform(p.seed, 0, step) * total;
  double cum = 0;
  int32_t last = order[0];
  for (int i = 0; i < vocab; ++i) {
    if (!kept[i]) continue;
    cum += prob[i];
    last = i;
    if (u < cum) return i;
  }
  return last;
}

float TokenLogprob(const float* logits, int vocab, int32_t token) {
  return static_cast<float>(logits[token] - LogSumExp(logits, vocab));
}

std::vector<std::pair<int32_t, float>> TopLogprobs(const float* logits, int vocab, int n) {
  const double lse = LogSumExp(logits, vocab);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  n = std::min(n, vocab);
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < n; ++i) out.emplace_back(order[i], static_cast<float>(logits[order[i]] - lse));
  return out;
}

}  // namespace spar::ref
