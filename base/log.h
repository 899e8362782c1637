// Minimal leveled logging to stderr. Debian 12's Abseil predates absl/log.
// Library code reports failures through absl::Status; logging is for daemons
// and tools. Request and response bodies are never logged by this module.
#ifndef SPAR_BASE_LOG_H_
#define SPAR_BASE_LOG_H_

#include <sstream>
#include <string_view>

namespace spar {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Set from SPAR_LOG_LEVEL
// (debug|info|warning|error) on first use, default info.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Swallows the stream when the level is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace spar

#define SPAR_LOG_LEVEL_DEBUG ::spar::LogLevel::kDebug
#define SPAR_LOG_LEVEL_INFO ::spar::LogLevel::kInfo
#define SPAR_LOG_LEVEL_WARNING ::spar::LogLevel::kWarning
#define SPAR_LOG_LEVEL_ERROR ::spar::LogLevel::kError

#define SPAR_LOG(severity)                                              \
  (SPAR_LOG_LEVEL_##severity < ::spar::MinLogLevel())                   \
      ? (void)0                                                         \
      : ::spar::LogVoidify() &                                          \
            ::spar::LogMessage(SPAR_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()

#endif  // SPAR_BASE_LOG_H_
