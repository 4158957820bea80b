#pragma once
// Output directories and files the user names (--out, a positional OUT, --log): the directories
// created with their missing parents, refused in one line when a part of the path is a file.
#include <filesystem>

namespace cpt::core {

// Creates `dir` and its missing parents (nothing when it exists as a directory). ConfigError when
// `dir` or one of its parents exists and is not a directory ("a/b: a is a file, not a directory");
// RuntimeError naming `dir` when the file system refuses (permissions, a full disk).
void create_output_directory(const std::filesystem::path& dir);

// create_output_directory of the directory `path` is to be written in (nothing for a bare name),
// its errors naming `path`.
void create_parent_directory(const std::filesystem::path& path);

// A file the user names for output (--log, --trace, a profile's --out): create_parent_directory,
// and ConfigError when `path` is a directory ("trace: expected a file, got a directory").
void prepare_output_file(const std::filesystem::path& path);

}  // namespace cpt::core
