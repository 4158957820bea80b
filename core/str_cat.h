#pragma once
// str_cat(a, b, ...): concatenates anything that streams into std::ostream; join(parts, sep).
// The project's formatting helpers while the toolchain (GCC 12) has no <format>.

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

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace cpt::core
