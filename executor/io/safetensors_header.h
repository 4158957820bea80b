#pragma once
// The header of a safetensors file (the format: safetensors.h), read and checked without LibTorch
// so that the checks can be fuzzed (fuzz/safetensors_fuzzer.cpp): every tensor's dtype, shape and
// byte range, and the metadata.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cpt::exec {

struct SafetensorInfo {
  std::string dtype;  // safetensors name: F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<std::int64_t> shape;
  std::size_t begin = 0, end = 0;  // byte range in the data section
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorInfo> tensors;
  std::vector<std::string> order;  // by byte offset, i.e. file order
  std::map<std::string, std::string> metadata;
  std::size_t data_offset = 0;  // where the data section starts: 8 + the header's length
};

// Bytes per element of a safetensors dtype name; 0 when cpt does not read that dtype.
[[nodiscard]] std::size_t safetensors_element_bytes(std::string_view dtype);

// The header of the `size` bytes at `bytes` (a whole file). ConfigError naming `where` and what is
// wrong: a file shorter than its header, a header that is not a JSON object (or nests deeper than
// core::kMaxJsonDepth), an entry without dtype, shape or two data offsets, an unsupported dtype,
// a negative dimension, a shape whose byte count wraps 64 bits, a byte range that does not match
// the shape or runs past the end of the file, overlapping tensors, non-string metadata.
[[nodiscard]] SafetensorsHeader parse_safetensors_header(const std::string& where, const std::byte* bytes,
                                                         std::size_t size);

}  // namespace cpt::exec
