// Subcommands that run in cpt-exec (train, data, checkpoint): `cpt` checks that the executor is
// built and hands it the arguments unchanged, help included (cli/executor_process.h says why
// the executor is a separate binary).
#include <CLI/CLI.hpp>

#include "cli/cpt/commands.h"
#include "cli/executor_process.h"
#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::cli {

void register_executor_command(CLI::App& app, const char* name, const char* description) {
  auto* cmd = app.add_subcommand(name, description);
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->set_help_flag();  // `cpt train --help` is answered by cpt-exec, which knows the options
  cmd->callback([cmd, name = std::string(name)] {
    if (!find_executor()) {
      throw core::RuntimeError(core::str_cat("`cpt ", name, "` needs the LibTorch executor, which this build lacks ",
                                             "(LibTorch or SentencePiece was not found at configure time; run ",
                                             "scripts/setup and rebuild)"));
    }
    std::vector<std::string> args{name};
    for (const auto& a : cmd->remaining()) args.push_back(a);
    exec_executor(args);
  });
}

}  // namespace cpt::cli
