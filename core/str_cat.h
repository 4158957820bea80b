#pragma once
// str_cat(a, b, ...): concatenates anything that streams into std::ostream. The project's one
// formatting helper while the toolchain (GCC 12) has no <format>.

#include <sstream>
#include <string>

namespace cpt::core {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace cpt::core
