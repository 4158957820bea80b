#include "core/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::core {

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  const auto tmp = std::filesystem::path(str_cat(path.string(), ".tmp.", ::getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw RuntimeError(str_cat(path.string(), ": cannot write: ", std::strerror(errno)));
  }
  const bool written = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed) {
    std::remove(tmp.c_str());
    throw RuntimeError(str_cat(path.string(), ": cannot write: ", std::strerror(saved)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw RuntimeError(str_cat(path.string(), ": cannot replace: ", ec.message()));
  }
}

}  // namespace cpt::core
