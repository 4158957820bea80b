#include "planner/export_text.h"

#include <nlohmann/json.hpp>

namespace cpt::planner {

std::string string_literal(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  return out;
}

std::string word(std::string_view text) {
  std::string out(text);
  for (char& ch : out) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                      ch == '_' || ch == '-';
    if (!keep) ch = '_';
  }
  return out;
}

}  // namespace cpt::planner
