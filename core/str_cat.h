#pragma once
// str_cat(a, b, ...): concatenates anything that streams into std::ostream; join(parts, sep);
// fixed(v, decimals) and significant(v, digits) for numbers. The project's formatting helpers while
// the toolchain (GCC 12) has no <format>.

#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace cpt::core {

// join({"a", "b", "c"}, ", ") == "a, b, c".
inline std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

// fixed(3.14159, 2) == "3.14".
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// significant(0.000123456, 3) == "0.000123"; significant(1234567, 3) == "1.23e+06" (printf's %g).
inline std::string significant(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace cpt::core
