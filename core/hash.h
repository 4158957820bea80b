#pragma once
// Stable 64-bit FNV-1a hash, printed as 16 hex digits. Used for plan provenance: the hash of the
// canonical JSON of a model or cluster spec identifies it across runs and machines.
// DO NOT CHANGE the algorithm: hashes are stored in plan files and checkpoints.

#include <cstdint>
#include <string>
#include <string_view>

namespace cpt::core {

std::uint64_t fnv1a64(std::string_view bytes);
std::string stable_hash_hex(std::string_view bytes);

}  // namespace cpt::core
