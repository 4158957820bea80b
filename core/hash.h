#pragma once
// Stable 64-bit FNV-1a hash, printed as 16 hex digits. Used for plan provenance: the hash of the
// canonical JSON of a model or cluster spec identifies it across runs and machines.
// DO NOT CHANGE the algorithm: hashes are stored in plan files and checkpoints.

#include <cstdint>
#include <string>
#include <string_view>

namespace cpt::core {

inline constexpr std::uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;

// FNV-1a 64 of `bytes`; pass the previous result as `state` to hash a stream in pieces
// (fnv1a64(b, fnv1a64(a)) == fnv1a64(a + b)).
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t state = kFnv1a64Offset);
// 16 lowercase hex digits.
std::string hex64(std::uint64_t h);
std::string stable_hash_hex(std::string_view bytes);

}  // namespace cpt::core
