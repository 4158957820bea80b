#include "executor/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

struct DtypeEntry {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeEntry kDtypes[] = {
    {"F32", torch::kFloat32}, {"BF16", torch::kBFloat16}, {"F16", torch::kFloat16}, {"F64", torch::kFloat64},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},     {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};

std::optional<torch::ScalarType> type_of(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

std::string name_of(torch::ScalarType t) {
  for (const auto& d : kDtypes) {
    if (t == d.type) return d.name;
  }
  throw core::InternalError(str_cat("safetensors: no dtype name for ", c10::toString(t)));
}

// Writes all of `bytes` or throws.
void write_all(int fd, const void* bytes, std::size_t n, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const auto w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw core::RuntimeError(str_cat(path.string(), ": write failed: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const auto where = path.string();
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = MappedFile::open(path);
  const auto size = f.mapping_->size();
  if (size < 8) {
    throw core::ConfigError(str_cat(where, ": not a safetensors file: ", size, " bytes, expected at least 8"));
  }
  const auto* bytes = f.mapping_->data();
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian on every platform cpt runs on
  if (header_len > size - 8) {
    throw core::ConfigError(str_cat(where, ": truncated: the header claims ", header_len, " bytes but the file has ",
                                    size - 8, " after the length"));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    throw core::ConfigError(str_cat(where, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) throw core::ConfigError(str_cat(where, ": header is not a JSON object"));
  f.data_ = bytes + 8 + header_len;
  const std::size_t data_size = size - 8 - header_len;
  std::vector<std::pair<std::size_t, std::string>> by_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw core::ConfigError(str_cat(where, ": __metadata__.", k, ": expected a string"));
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    SafetensorInfo info;
    try {
      info.dtype = value.at("dtype").get<std::string>();
      info.shape = value.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<std::size_t>>();
      if (offsets.size() != 2) throw core::ConfigError("data_offsets needs two numbers");
      info.begin = offsets[0];
      info.end = offsets[1];
    } catch (const nlohmann::json::exception& e) {
      throw core::ConfigError(str_cat(where, ": tensor ", name, ": malformed entry: ", e.what()));
    }
    const auto type = type_of(info.dtype);
    if (!type) throw core::ConfigError(str_cat(where, ": tensor ", name, ": unsupported dtype ", info.dtype));
    // Element and byte counts multiplied with overflow checks: a shape whose size wraps around would
    // otherwise pass the byte-range check below.
    std::size_t numel = 1, expected = 0;
    bool wraps = false;
    for (const auto d : info.shape) {
      if (d < 0) throw core::ConfigError(str_cat(where, ": tensor ", name, ": negative dimension ", d));
      wraps = wraps || __builtin_mul_overflow(numel, static_cast<std::size_t>(d), &numel);
    }
    wraps = wraps || __builtin_mul_overflow(numel, c10::elementSize(*type), &expected);
    if (wraps) {
      throw core::ConfigError(str_cat(where, ": tensor ", name, ": shape ", shape_text(info.shape),
                                      " holds more bytes than any file"));
    }
    if (info.end < info.begin || info.end - info.begin != expected) {
      throw core::ConfigError(str_cat(where, ": tensor ", name, ": byte range [", info.begin, ", ", info.end,
                                      ") does not hold ", numel, " ", info.dtype, " values (", expected, " bytes)"));
    }
    if (info.end > data_size) {
      throw core::ConfigError(str_cat(where, ": truncated: tensor ", name, " ends at byte ", info.end,
                                      " of a data section of ", data_size, " bytes"));
    }
    by_offset.emplace_back(info.begin, name);
    f.tensors_.emplace(name, std::move(info));
  }
  std::sort(by_offset.begin(), by_offset.end());
  std::size_t cursor = 0;
  for (const auto& [begin, name] : by_offset) {
    if (begin < cursor) throw core::ConfigError(str_cat(where, ": tensor ", name, " overlaps the previous one"));
    cursor = f.tensors_.at(name).end;
    f.order_.push_back(name);
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const { return order_; }

const SafetensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw core::ConfigError(str_cat(path_.string(), ": no tensor named ", name));
  return it->second;
}

torch::ScalarType SafetensorsFile::stored_type(const std::string& name) const { return *type_of(info(name).dtype); }

torch::Tensor SafetensorsFile::load(const std::string& name, torch::ScalarType dtype) const {
  const auto& i = info(name);
  // Copy into an owned, aligned tensor of the stored type first (the mapping may be unaligned for
  // it), then convert.
  auto stored = torch::empty(i.shape, torch::TensorOptions(stored_type(name)));
  std::memcpy(stored.data_ptr(), data_ + i.begin, i.end - i.begin);
  return stored.scalar_type() == dtype ? stored : stored.to(dtype);
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const auto bytes = static_cast<std::size_t>(c.numel() * c.element_size());
    header[name] = {{"dtype", name_of(c.scalar_type())}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(std::move(c));
  }
  auto text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t header_len = text.size();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw core::RuntimeError(str_cat(path.string(), ": cannot create: ", std::strerror(errno)));
  try {
    write_all(fd, &header_len, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const auto& c : contiguous) {
      write_all(fd, c.data_ptr(), static_cast<std::size_t>(c.numel() * c.element_size()), path);
    }
    if (::fsync(fd) != 0) throw core::RuntimeError(str_cat(path.string(), ": fsync failed: ", std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace cpt::exec
