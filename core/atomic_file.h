#pragma once
// Atomic file output: the text is written to "<path>.tmp.<pid>", flushed, then renamed over
// `path`, so a reader (or a crash) never sees a half-written file. RuntimeError naming the path
// when any step fails; the temporary file is removed on failure.

#include <filesystem>
#include <string_view>

namespace cpt::core {

void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace cpt::core
