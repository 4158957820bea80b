#pragma once
// File names that a file names (a dataset manifest's shards, a checkpoint manifest's files, a Hugging
// Face index's weight files) resolved inside the directory that holds them, never outside it.
#include <filesystem>
#include <string>
#include <string_view>

namespace cpt::core {

// `dir / name` when `name` is relative and none of its components is "..". ConfigError otherwise:
// "<origin>: <what> \"<name>\": expected a path inside <dir>". An empty name is refused too.
std::filesystem::path path_inside(const std::filesystem::path& dir, std::string_view name, std::string_view origin,
                                  std::string_view what);

}  // namespace cpt::core
