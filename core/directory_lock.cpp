#include "core/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/output_directory.h"
#include "core/str_cat.h"

namespace cpt::core {

namespace {

// The holder's pid as it wrote it into the lock file: its leading digits, "?" when none.
std::string written_pid(int fd) {
  char pid[32] = {};
  const auto n = ::pread(fd, pid, sizeof pid - 1, 0);
  std::string digits;
  for (ssize_t i = 0; i < n && pid[i] >= '0' && pid[i] <= '9'; ++i) digits += pid[i];
  return digits.empty() ? "?" : digits;
}

}  // namespace

std::optional<std::string> DirectoryLock::holder_of(const std::filesystem::path& dir) {
  // Non-blocking: a lock path that is a FIFO must not wait for a writer.
  const int fd = ::open((dir / ".cpt.lock").c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  std::optional<std::string> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) holder = written_pid(fd);
  } else {
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
  return holder;
}

DirectoryLock DirectoryLock::acquire(const std::filesystem::path& dir, std::string_view holder) {
  create_output_directory(dir);
  const auto path = dir / ".cpt.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(str_cat(path.string(), ": cannot open: ", std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const auto holder_pid = written_pid(fd);
    ::close(fd);
    if (error != EWOULDBLOCK) throw RuntimeError(str_cat(path.string(), ": cannot lock: ", std::strerror(error)));
    throw RuntimeError(str_cat(dir.string(), ": ", holder, " is writing it (pid ", holder_pid,
                               "); wait for it to end or choose another directory"));
  }
  const auto text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    ::close(fd);
    throw RuntimeError(str_cat(path.string(), ": cannot write: ", std::strerror(errno)));
  }
  return DirectoryLock(fd);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace cpt::core
