// Subcommands whose implementation is not built yet. They are listed in `cpt --help` so that the
// CLI's shape is visible from the start, and each says what is missing instead of pretending.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::cli {

void register_unbuilt_command(CLI::App& app, const char* name, const char* description, const char* missing) {
  auto* cmd = app.add_subcommand(name, core::str_cat(description, " [not built yet]"));
  cmd->allow_extras();
  cmd->callback([name = std::string(name), missing = std::string(missing)] {
    throw core::RuntimeError(core::str_cat("`cpt ", name, "` is not built yet: it needs ", missing, "."));
  });
}

}  // namespace cpt::cli
