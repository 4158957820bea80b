#pragma once
// Subcommands of cpt-exec (the LibTorch side). `cpt train|data|checkpoint ...` hands its
// arguments to these unchanged (cli/executor_process.h).
namespace CLI {
class App;
}

namespace cpt::cli {

// Ends cpt-exec with `code` and no message of its own (the launcher's ranks printed theirs).
struct ExitWith {
  int code = 0;
};

void register_exec_train_command(CLI::App& app);
void register_exec_data_command(CLI::App& app);
void register_exec_checkpoint_command(CLI::App& app);
void register_exec_doctor_command(CLI::App& app);
void register_exec_calibrate_commands(CLI::App& app);

}  // namespace cpt::cli
