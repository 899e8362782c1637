// Stop strings on streamed text. Text arrives as UTF-8-complete deltas (from
// the incremental detokenizer); any tail that could still become a stop
// string is held back, so no client ever sees text beyond a stop. On a
// match the text is cut before the stop string (or after it, when the
// request keeps stop strings), as in vLLM and OpenAI.
//
// Pure and thread-compatible; one instance per sequence.
#ifndef SPAR_SERVICES_SCHEDULER_STOP_STRINGS_H_
#define SPAR_SERVICES_SCHEDULER_STOP_STRINGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace spar {

class StopStringMatcher {
 public:
  StopStringMatcher(std::vector<std::string> stops, bool include_stop);

  // Feeds a delta; returns the text that is now safe to emit. After a match
  // it returns only the final piece once, then nothing.
  std::string Add(absl::string_view delta);
  // End of stream without a match: the held-back text.
  std::string Flush();
  // The stop string that matched, if any.
  const std::optional<std::string>& matched() const { return matched_; }
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string held_;
  std::optional<std::string> matched_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_STOP_STRINGS_H_
