#include "base/sampling_params.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace spar {

std::string FormatFieldValue(double value) {
  if (std::isnan(value)) return "NaN";
  // The value was sent as (or stored in) a float: its shortest float form.
  const float f = static_cast<float>(value);
  if (static_cast<double>(f) != value && std::isfinite(value)) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), value);
    return std::string(buf, r.ptr);
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::string(buf, r.ptr);
}

std::optional<SamplingViolation> CheckSamplingParams(SamplingParams* p, const SamplingFieldNames& names) {
  auto range = [](absl::string_view field, double v, double lo, bool lo_open, double hi,
                  absl::string_view rule) -> std::optional<SamplingViolation> {
    const bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;  // false for NaN
    if (ok) return std::nullopt;
    return SamplingViolation{std::string(field), std::string(rule), FormatFieldValue(v)};
  };
  if (auto v = range(names.temperature, p->temperature, 0, false, 100, "must be in [0, 100]")) return v;
  if (auto v = range(names.top_p, p->top_p, 0, true, 1, "must be in (0, 1]")) return v;
  if (p->top_k < -1) {
    return SamplingViolation{std::string(names.top_k), "must be >= 0 (0 or -1: off)", absl::StrCat(p->top_k)};
  }
  if (p->top_k < 0) p->top_k = 0;
  if (auto v = range(names.min_p, p->min_p, 0, false, 1, "must be in [0, 1]")) return v;
  if (auto v = range(names.repetition_penalty, p->repetition_penalty, 0, true, 100, "must be in (0, 100]")) return v;
  if (auto v = range(names.frequency_penalty, p->frequency_penalty, -2, false, 2, "must be in [-2, 2]")) return v;
  if (auto v = range(names.presence_penalty, p->presence_penalty, -2, false, 2, "must be in [-2, 2]")) return v;
  return std::nullopt;
}

}  // namespace spar
