#include "core/hash.h"

#include <cstdio>

namespace cpt::core {

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t state) {
  std::uint64_t h = state;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return h;
}

std::string hex64(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string stable_hash_hex(std::string_view bytes) { return hex64(fnv1a64(bytes)); }

}  // namespace cpt::core
