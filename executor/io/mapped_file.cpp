#include "executor/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw core::ConfigError(core::str_cat(path.string(), ": cannot open: ", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw core::ConfigError(core::str_cat(path.string(), ": cannot stat: ", std::strerror(errno)));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* address = nullptr;
  if (size > 0) {
    address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      ::close(fd);
      throw core::ConfigError(core::str_cat(path.string(), ": mmap failed: ", std::strerror(errno)));
    }
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(new MappedFile(address, size));
}

MappedFile::~MappedFile() {
  if (address_ != nullptr && size_ > 0) ::munmap(address_, size_);
}

}  // namespace cpt::exec
