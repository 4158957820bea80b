#pragma once
// Running the real binaries from CLI tests: a shell command with its output captured, files read
// whole, and the text every machine has after scripts/setup (the Python standard library).
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cpt::cli_testing {

struct Run {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` under sh with stdout and stderr captured into files of `dir`.
inline Run sh(const std::string& command, const std::filesystem::path& dir) {
  const auto out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = "(" + command + ") >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  return Run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

// /usr/lib/python3.X/json (scripts/setup installs python3); empty when absent.
inline std::filesystem::path python_json_package() {
  for (const char* v : {"3.13", "3.12", "3.11", "3.10", "3.9"}) {
    const std::filesystem::path p = std::string("/usr/lib/python") + v + "/json";
    if (std::filesystem::exists(p / "decoder.py")) return p;
  }
  return {};
}

// `text` written to `name` in the temporary directory; its path.
inline std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

// Lines of a captured output (its newlines).
inline int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace cpt::cli_testing
