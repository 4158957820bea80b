#pragma once
// Rank-prefixed logging to stderr. Every line carries the process prefix, e.g.
//   [r12 tp0 pp1 dp3] info: loaded plan runs/p1/plan.json
// info0() logs only on the process marked as rank 0 (the default for a single process).
// Results for people go to stdout (tables); results for programs go to files; logs go here.

#include <string>
#include <string_view>

#include "core/str_cat.h"

namespace cpt::core {

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };

void set_log_level(LogLevel level);
[[nodiscard]] LogLevel log_level();
// ConfigError naming `flag` unless `name` is debug|info|warn|error|off.
LogLevel parse_log_level(std::string_view name, std::string_view flag);

// The prefix printed in brackets ("" prints none) and whether this process is rank 0.
void set_log_prefix(std::string prefix, bool is_rank0);

void log_line(LogLevel level, std::string_view message);

template <class... Args>
void debug(const Args&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, str_cat(args...));
}
template <class... Args>
void info(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, str_cat(args...));
}
template <class... Args>
void warn(const Args&... args) {
  if (log_level() <= LogLevel::kWarn) log_line(LogLevel::kWarn, str_cat(args...));
}
bool log_is_rank0();
template <class... Args>
void info0(const Args&... args) {
  if (log_is_rank0()) info(args...);
}

}  // namespace cpt::core
