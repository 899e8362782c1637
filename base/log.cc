#include "base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace spar {
namespace {

std::atomic<int> g_min_level{-1};

LogLevel LevelFromEnv() {
  const char* env = std::getenv("SPAR_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warning") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

LogLevel MinLogLevel() {
  int v = g_min_level.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(LevelFromEnv());
    g_min_level.store(v, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(v);
}

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  stream_ << LevelTag(level) << " " << ms / 1000 << "." << (ms % 1000) / 100 << (ms % 100) / 10
          << ms % 10 << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  static std::mutex mu;
  stream_ << '\n';
  std::string text = stream_.str();
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ >= LogLevel::kWarning) std::fflush(stderr);
}

}  // namespace spar
