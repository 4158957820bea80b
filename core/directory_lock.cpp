#include "core/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::core {

DirectoryLock DirectoryLock::acquire(const std::filesystem::path& dir, std::string_view holder) {
  std::filesystem::create_directories(dir);
  const auto path = dir / ".cpt.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(str_cat(path.string(), ": cannot open: ", std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char pid[32] = {};
    const auto n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (error != EWOULDBLOCK) throw RuntimeError(str_cat(path.string(), ": cannot lock: ", std::strerror(error)));
    std::string holder_pid(pid, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!holder_pid.empty() && (holder_pid.back() == '\n' || holder_pid.back() == ' ')) holder_pid.pop_back();
    throw RuntimeError(str_cat(dir.string(), ": ", holder, " is writing it (pid ", holder_pid.empty() ? "?" : holder_pid,
                               "); wait for it to end or choose another directory"));
  }
  const auto text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    ::close(fd);
    throw RuntimeError(str_cat(path.string(), ": cannot write: ", std::strerror(errno)));
  }
  return DirectoryLock(fd);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace cpt::core
