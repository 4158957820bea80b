#pragma once
// A file mapped read-only into memory (shards and safetensors are read through it, never copied
// whole). LibTorch-free.
#include <cstddef>
#include <filesystem>
#include <memory>

namespace cpt::exec {

class MappedFile {
 public:
  // ConfigError naming the file when it cannot be opened or mapped. An empty file maps to size 0.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  [[nodiscard]] const std::byte* data() const { return static_cast<const std::byte*>(address_); }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  MappedFile(void* address, std::size_t size) : address_(address), size_(size) {}
  void* address_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cpt::exec
