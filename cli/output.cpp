#include "cli/output.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace cpt::cli {

void print_json(const core::Json& j) { std::cout << j.dump(2) << "\n"; }

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string format_count(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (n >= 1'000'000'000) return fixed(v / 1e9, 2) + " B";
  if (n >= 1'000'000) return fixed(v / 1e6, 1) + " M";
  if (n >= 1'000) return fixed(v / 1e3, 1) + " K";
  return std::to_string(n);
}

}  // namespace cpt::cli
