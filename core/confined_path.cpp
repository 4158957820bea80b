#include "core/confined_path.h"

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::core {

std::filesystem::path path_inside(const std::filesystem::path& dir, std::string_view name, std::string_view origin,
                                  std::string_view what) {
  const std::filesystem::path relative(name);
  bool escapes = name.empty() || relative.is_absolute() || relative.has_root_name();
  for (const auto& part : relative) escapes = escapes || part == "..";
  if (escapes) {
    throw ConfigError(str_cat(origin, ": ", what, " \"", name, "\": expected a path inside ", dir.string()));
  }
  return dir / relative;
}

}  // namespace cpt::core
