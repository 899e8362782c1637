#include "engine/random_selection.h"

#include <algorithm>

#include "base/rng.h"

namespace spar {

void RandomCausalSelection(uint64_t seed, int layer, int32_t position, int32_t ctx, int topk, int32_t* out) {
  const int n = std::min<int64_t>(topk, ctx);
  int count = 0;
  if (n == ctx) {
    for (; count < n; ++count) out[count] = count;
  } else {
    // Floyd's algorithm: n distinct draws from [0, ctx), each subset equally likely.
    Rng rng(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(layer) ^ SplitMix64(static_cast<uint64_t>(position)))));
    for (int32_t j = ctx - n; j < ctx; ++j) {
      const int32_t t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(j) + 1));
      const bool seen = std::find(out, out + count, t) != out + count;
      out[count++] = seen ? j : t;
    }
    std::sort(out, out + count);
  }
  for (int i = count; i < topk; ++i) out[i] = -1;
}

}  // namespace spar
