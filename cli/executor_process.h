#pragma once
// The executor runs in its own binary, `cpt-exec`, beside `cpt`. Linking LibTorch (with CUDA,
// cuDNN and NCCL) into `cpt` would cost every command ~0.4 s of library loading and static
// initialisation, including `plan`, which must answer in well under a second; so `cpt` links no
// LibTorch and starts `cpt-exec` only for the subcommands that train or measure.
// (`cpt models list`: 2 ms without LibTorch, 430 ms with it, on the 2-core development machine.)

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace cpt::cli {

// `cpt-exec` in the directory of the running `cpt`, if it exists (it is not built without LibTorch).
std::optional<std::filesystem::path> find_executor();

struct ProcessOutput {
  int exit_code = -1;
  std::string out;  // standard output; standard error passes through to ours
};

// Runs `cpt-exec args...` and captures its standard output. REQUIRES: find_executor().
// RuntimeError when it cannot be started or is killed by a signal.
ProcessOutput run_executor(const std::vector<std::string>& args);

// Runs `cpt-exec args...` with this process's standard streams and waits: its exit code.
// REQUIRES: find_executor(). RuntimeError when it cannot be started or is killed by a signal.
int run_executor_passthrough(const std::vector<std::string>& args);

// The same for this `cpt` binary itself (a subcommand run as a step of another).
int run_self_passthrough(const std::vector<std::string>& args);

// A step that refused its input (exit 2) has said why in its own one line: the command that ran
// it exits 2 without a line of its own (cpt's main catches this).
struct StepRefusedInput {};

// The exit `code` of `cpt args...` run as a step of another command: nothing when 0,
// StepRefusedInput when it refused its input, else a RuntimeError naming the step (its own lines
// above say why).
void check_step_exit(int code, const std::vector<std::string>& args);

// Runs `cpt-exec args...` and parses its standard output as JSON. RuntimeError when it fails.
core::Json run_executor_json(const std::vector<std::string>& args);

// Replaces this process with `cpt-exec args...` (standard streams, terminal and exit code pass
// through unchanged). REQUIRES: find_executor(). RuntimeError when exec fails.
[[noreturn]] void exec_executor(const std::vector<std::string>& args);

}  // namespace cpt::cli
