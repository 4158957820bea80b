#pragma once
// The command line a launcher gives the processes it starts: the options of its own command line,
// read back from CLI11's registry of the command (the one table of its flags), so that a flag added
// to the command reaches every rank without being listed twice.
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace cpt::cli {

// `command`'s name, then every option given on its parsed command line, as given ("--steps 5",
// a flag with its value: "--resume=true", "--resume=false"), in the order the command registers them; options named in
// `withheld`
// ("--nproc-per-node") and options not given (their defaults are the started processes' too) are
// left out.
std::vector<std::string> forwarded_arguments(const CLI::App& command, const std::vector<std::string>& withheld);

}  // namespace cpt::cli
