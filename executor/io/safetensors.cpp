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

struct DtypeEntry {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeEntry kDtypes[] = {{"F32", torch::kFloat32}, {"BF16", torch::kBFloat16}, {"F16", torch::kFloat16},
                                  {"F64", torch::kFloat64}, {"I64", torch::kInt64},     {"I32", torch::kInt32},
                                  {"I16", torch::kInt16},   {"I8", torch::kInt8},       {"U8", torch::kUInt8},
                                  {"BOOL", torch::kBool}};

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
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = MappedFile::open(path);
  auto header = parse_safetensors_header(path.string(), f.mapping_->data(), f.mapping_->size());
  f.data_ = f.mapping_->data() + header.data_offset;
  f.tensors_ = std::move(header.tensors);
  f.order_ = std::move(header.order);
  f.metadata_ = std::move(header.metadata);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  return order_;
}

const SafetensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw core::ConfigError(str_cat(path_.string(), ": no tensor named ", name));
  return it->second;
}

torch::ScalarType SafetensorsFile::stored_type(const std::string& name) const {
  return *type_of(info(name).dtype);
}

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
    header[name] = {
        {"dtype", name_of(c.scalar_type())}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
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
