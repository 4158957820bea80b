#pragma once
// One writer per output directory: an exclusive flock(2) on DIR/.cpt.lock, held for the lifetime of
// the object and released by the kernel when its process ends, however it ends. The holder's pid is
// written into the file for the message a second writer gets.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace cpt::core {

class DirectoryLock {
 public:
  // Creates `dir` if needed. RuntimeError "<dir>: <holder> is writing it (pid N); ..." when another
  // process holds the lock (`holder` names what it is, e.g. "another cpt train").
  static DirectoryLock acquire(const std::filesystem::path& dir, std::string_view holder);
  // The pid the process holding `dir`'s lock wrote ("?" when it wrote none), or nullopt when no
  // process holds it or `dir` has no lock file. Creates nothing; it tests the lock by taking it
  // shared for an instant, during which a writer starting at once is refused as by a holder.
  static std::optional<std::string> holder_of(const std::filesystem::path& dir);
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace cpt::core
