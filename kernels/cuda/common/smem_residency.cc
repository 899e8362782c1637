#include "kernels/cuda/common/smem_residency.h"

#include <cstdlib>

#include "kernels/cuda/common/device_info.h"

namespace spar {
namespace {

int64_t ReadEmulatedSmem() {
  const char* v = std::getenv("SPAR_SMEM_PER_SM_KB");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long kb = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || kb <= 0 || kb > (int64_t{1} << 20)) return 0;
  return static_cast<int64_t>(kb) * 1024;
}

}  // namespace

int64_t SmemForResidency(int64_t smem_bytes, const SmemFigures& real, int64_t emulated_per_sm) {
  if (emulated_per_sm <= 0 || real.per_sm <= emulated_per_sm) return smem_bytes;
  const int64_t fit = emulated_per_sm / (smem_bytes + real.reserved_per_block);  // blocks an emulated SM holds
  if (fit < 1) return -1;
  // The least request for which fit + 1 blocks overflow the real SM:
  // (fit + 1) x (bytes + reserved) > per_sm.
  int64_t bytes = real.per_sm / (fit + 1) - real.reserved_per_block + 1;
  if (bytes < smem_bytes) bytes = smem_bytes;
  bytes = (bytes + 15) / 16 * 16;
  if (real.max_per_block > 0 && bytes > real.max_per_block) bytes = real.max_per_block;
  return bytes < smem_bytes ? smem_bytes : bytes;
}

int64_t EmulatedSmemPerSm() {
  static const int64_t bytes = ReadEmulatedSmem();
  return bytes;
}

int64_t LaunchSmemBytes(int64_t smem_bytes) {
  const int64_t emulated = EmulatedSmemPerSm();
  if (emulated <= 0) return smem_bytes;
  return SmemForResidency(smem_bytes, CurrentDeviceInfo().smem, emulated);
}

}  // namespace spar
