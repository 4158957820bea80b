#include "cli/forwarded_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>

namespace cpt::cli {

std::vector<std::string> forwarded_arguments(const CLI::App& command, const std::vector<std::string>& withheld) {
  std::vector<std::string> arguments{command.get_name()};
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_lnames().empty()) continue;
    const std::string flag = "--" + option->get_lnames().front();
    if (std::find(withheld.begin(), withheld.end(), flag) != withheld.end()) continue;
    if (option->get_expected_min() == 0) {  // a flag: its value as given ("--resume=false" stays false)
      arguments.push_back(flag + (option->as<bool>() ? "=true" : "=false"));
      continue;
    }
    for (const std::string& value : option->results()) {
      arguments.push_back(flag);
      arguments.push_back(value);
    }
  }
  return arguments;
}

}  // namespace cpt::cli
