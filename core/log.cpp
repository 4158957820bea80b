#include "core/log.h"

#include <cstdio>
#include <mutex>

#include "core/error.h"

namespace cpt::core {
namespace {

// Process-wide logger state. It is set once at start-up by the CLI (or the launcher, per rank) and
// only read afterwards; the mutex keeps lines from interleaving when ranks run as threads in tests.
struct LoggerState {
  LogLevel level = LogLevel::kInfo;
  std::string prefix;
  bool is_rank0 = true;
  std::mutex mutex;
};

LoggerState& state() {
  static LoggerState s;
  return s;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { state().level = level; }
LogLevel log_level() { return state().level; }
bool log_is_rank0() { return state().is_rank0; }

LogLevel parse_log_level(std::string_view name, std::string_view flag) {
  for (auto l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError, LogLevel::kOff}) {
    if (name == level_name(l) || (l == LogLevel::kWarn && name == "warn")) return l;
  }
  throw ConfigError(str_cat(flag, ": expected one of debug|info|warn|error|off, got \"", name, "\""));
}

void set_log_prefix(std::string prefix, bool is_rank0) {
  std::lock_guard lock(state().mutex);
  state().prefix = std::move(prefix);
  state().is_rank0 = is_rank0;
}

void log_line(LogLevel level, std::string_view message) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (s.prefix.empty()) {
    std::fprintf(stderr, "%s: %.*s\n", level_name(level), static_cast<int>(message.size()), message.data());
  } else {
    std::fprintf(stderr, "[%s] %s: %.*s\n", s.prefix.c_str(), level_name(level),
                 static_cast<int>(message.size()), message.data());
  }
}

}  // namespace cpt::core
