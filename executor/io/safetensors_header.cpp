#include "executor/io/safetensors_header.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

[[noreturn]] void fail_entry(const std::string& where, const std::string& name, const std::string& what) {
  throw core::ConfigError(str_cat(where, ": tensor ", name, ": ", what));
}

// One tensor entry of the header: its fields, checked against `data_size`. Numbers are read only
// when they are integers in range (a float converted to an integer type is undefined behaviour).
SafetensorInfo read_entry(const std::string& where, const std::string& name, const core::Json& value,
                          std::size_t data_size) {
  const auto fail = [&](const std::string& what) { fail_entry(where, name, what); };
  if (!value.is_object())
    fail(str_cat("expected an object with dtype, shape and data_offsets, got ", core::describe_json(value)));
  const auto field = [&](const char* key) -> const core::Json& {
    const auto it = value.find(key);
    if (it == value.end()) fail_entry(where, name, str_cat("no ", key));
    return *it;
  };
  SafetensorInfo info;
  const auto& dtype = field("dtype");
  if (!dtype.is_string()) fail(str_cat("dtype: expected a string, got ", core::describe_json(dtype)));
  info.dtype = dtype.get<std::string>();
  const auto& shape = field("shape");
  if (!shape.is_array()) fail(str_cat("shape: expected an array of integers, got ", core::describe_json(shape)));
  for (const auto& d : shape) {
    if (!d.is_number_integer()) fail(str_cat("shape: expected integers, got ", core::describe_json(d)));
    if (d.is_number_unsigned() && d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(str_cat("shape: dimension ", d.get<std::uint64_t>(), " holds more bytes than any file"));
    }
    info.shape.push_back(d.get<std::int64_t>());
  }
  const auto& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(str_cat("data_offsets: expected two non-negative integers, got ", core::describe_json(offsets)));
  }
  info.begin = offsets[0].get<std::size_t>();
  info.end = offsets[1].get<std::size_t>();
  const std::size_t element_bytes = safetensors_element_bytes(info.dtype);
  if (element_bytes == 0)
    throw core::ConfigError(str_cat(where, ": tensor ", name, ": unsupported dtype ", info.dtype));
  // Element and byte counts multiplied with overflow checks: a shape whose size wraps around would
  // otherwise pass the byte-range check below.
  std::size_t numel = 1, expected = 0;
  bool wraps = false;
  for (const auto d : info.shape) {
    if (d < 0) throw core::ConfigError(str_cat(where, ": tensor ", name, ": negative dimension ", d));
    wraps = wraps || __builtin_mul_overflow(numel, static_cast<std::size_t>(d), &numel);
  }
  wraps = wraps || __builtin_mul_overflow(numel, element_bytes, &expected);
  if (wraps) {
    throw core::ConfigError(
        str_cat(where, ": tensor ", name, ": shape ", shape_text(info.shape), " holds more bytes than any file"));
  }
  if (info.end < info.begin || info.end - info.begin != expected) {
    throw core::ConfigError(str_cat(where, ": tensor ", name, ": byte range [", info.begin, ", ", info.end,
                                    ") does not hold ", numel, " ", info.dtype, " values (", expected, " bytes)"));
  }
  if (info.end > data_size) {
    throw core::ConfigError(str_cat(where, ": truncated: tensor ", name, " ends at byte ", info.end,
                                    " of a data section of ", data_size, " bytes"));
  }
  return info;
}

}  // namespace

std::size_t safetensors_element_bytes(std::string_view dtype) {
  struct Entry {
    std::string_view name;
    std::size_t bytes;
  };
  constexpr Entry kSizes[] = {{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8},
                              {"I32", 4}, {"I16", 2},  {"I8", 1},  {"U8", 1},  {"BOOL", 1}};
  for (const auto& e : kSizes) {
    if (e.name == dtype) return e.bytes;
  }
  return 0;
}

SafetensorsHeader parse_safetensors_header(const std::string& where, const std::byte* bytes, std::size_t size) {
  if (size < 8)
    throw core::ConfigError(str_cat(where, ": not a safetensors file: ", size, " bytes, expected at least 8"));
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian on every platform cpt runs on
  if (header_len > size - 8) {
    throw core::ConfigError(str_cat(where, ": truncated: the header claims ", header_len, " bytes but the file has ",
                                    size - 8, " after the length"));
  }
  // The strict reader bounds the nesting (a deep header would overflow the stack).
  const auto doc = core::parse_json_text(
      std::string_view(reinterpret_cast<const char*>(bytes + 8), static_cast<std::size_t>(header_len)), where);
  const core::Json& header = doc.root();
  if (!header.is_object()) throw core::ConfigError(str_cat(where, ": header is not a JSON object"));
  SafetensorsHeader h;
  h.data_offset = 8 + static_cast<std::size_t>(header_len);
  const std::size_t data_size = size - h.data_offset;
  std::vector<std::pair<std::size_t, std::string>> by_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw core::ConfigError(str_cat(where, ": __metadata__: expected an object"));
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw core::ConfigError(str_cat(where, ": __metadata__.", k, ": expected a string"));
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto info = read_entry(where, name, value, data_size);
    by_offset.emplace_back(info.begin, name);
    h.tensors.emplace(name, std::move(info));  // names are unique: the parser keeps a key's last value
  }
  std::sort(by_offset.begin(), by_offset.end());
  std::size_t cursor = 0;
  for (const auto& [begin, name] : by_offset) {
    if (begin < cursor) throw core::ConfigError(str_cat(where, ": tensor ", name, " overlaps the previous one"));
    cursor = h.tensors.at(name).end;
    h.order.push_back(name);
  }
  return h;
}

}  // namespace cpt::exec
