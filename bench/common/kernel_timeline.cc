#include "bench/common/kernel_timeline.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace spar::bench {
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kRecordAlign = 8;  // CUPTI's record alignment

std::mutex g_mu;
std::vector<TimelineEvent> g_events;  // guarded by g_mu: CUPTI completes buffers on its own thread

absl::Status CuptiStatus(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return absl::InternalError(absl::StrCat("CUPTI ", what, ": ", text != nullptr ? text : "unknown error"));
}

// "spar::x::(anonymous namespace)::Kernel<...>(params)" -> "Kernel<...>",
// at most 72 characters: enough to tell the step's kernels apart.
std::string ShortKernelName(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  int depth = 0;
  size_t cut = std::string::npos, last_scope = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth == 0 && c == '(' && name.compare(i, 21, "(anonymous namespace)") != 0) {
      cut = i;
      break;
    }
    if (depth == 0 && c == ':' && i + 1 < name.size() && name[i + 1] == ':') last_scope = i + 2;
  }
  name = name.substr(last_scope, cut == std::string::npos ? std::string::npos : cut - last_scope);
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);  // a kernel outside any namespace
  for (const std::string junk : {"spar::", "(anonymous namespace)::", "unnamed>::"}) {
    for (size_t at; (at = name.find(junk)) != std::string::npos;) name.erase(at, junk.size());
  }
  return name.size() > 72 ? name.substr(0, 69) + "..." : name;
}

const char* CopyKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    default: return "other";
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<TimelineEvent> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    TimelineEvent e;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      e = {ShortKernelName(k->name), k->start, k->end, k->streamId, k->correlationId};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      e = {absl::StrCat("memcpy ", CopyKindName(m->copyKind), " ", m->bytes, " B"), m->start, m->end, m->streamId,
           m->correlationId};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      e = {absl::StrCat("memset ", m->bytes, " B"), m->start, m->end, m->streamId, m->correlationId};
    } else {
      continue;
    }
    got.push_back(std::move(e));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_events.insert(g_events.end(), got.begin(), got.end());
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

absl::Status KernelTimeline::Start() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_events.clear();
  }
  static const absl::Status registered =
      CuptiStatus(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register callbacks");
  if (!registered.ok()) return registered;
  for (CUpti_ActivityKind kind : kKinds) {
    if (absl::Status st = CuptiStatus(cuptiActivityEnable(kind), "enable"); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TimelineEvent>> KernelTimeline::Stop() {
  absl::Status st = CuptiStatus(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  for (CUpti_ActivityKind kind : kKinds) st.Update(CuptiStatus(cuptiActivityDisable(kind), "disable"));
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<TimelineEvent> events = std::move(g_events);
  g_events.clear();
  std::stable_sort(events.begin(), events.end(),
                   [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_ns < b.start_ns; });
  return events;
}

}  // namespace spar::bench
