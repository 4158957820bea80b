#include "core/output_directory.h"

#include <system_error>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::core {

namespace fs = std::filesystem;

namespace {

// Creates `dir`; errors name `named` (dir itself, or the file to be written in it).
void create_directory_for(const fs::path& dir, const fs::path& named) {
  // The deepest part of the path that exists must be a directory.
  for (fs::path part = dir; !part.empty(); part = part.parent_path()) {
    std::error_code ec;
    const auto status = fs::status(part, ec);
    if (!fs::exists(status)) {
      const bool loop = ec == std::errc::too_many_symbolic_link_levels;
      std::error_code link_error;
      if (fs::is_symlink(fs::symlink_status(part, link_error))) {
        throw ConfigError(str_cat(named.string(), ": ", part == named ? "" : part.string() + " ",
                                  "is a symbolic link to ", fs::read_symlink(part, link_error).string(),
                                  loop ? ", a loop of links" : ", which does not exist"));
      }
      if (part == part.parent_path()) break;  // a root that does not resolve: the creation says why
      continue;
    }
    if (!fs::is_directory(status)) {
      throw ConfigError(part == named ? str_cat(named.string(), ": is a file, not a directory")
                                      : str_cat(named.string(), ": ", part.string(), " is a file, not a directory"));
    }
    break;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(str_cat(named.string(), ": cannot create ", dir.string(), ": ", ec.message()));
}

}  // namespace

void create_output_directory(const fs::path& dir) {
  create_directory_for(dir, dir);
}

void create_parent_directory(const fs::path& path) {
  if (path.has_parent_path()) create_directory_for(path.parent_path(), path);
}

void prepare_output_file(const fs::path& path) {
  create_parent_directory(path);
  if (fs::is_directory(path)) throw ConfigError(str_cat(path.string(), ": expected a file, got a directory"));
}

}  // namespace cpt::core
