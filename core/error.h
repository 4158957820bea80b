#pragma once
// The error types of cpt, one per failure category (docs/conventions.md, "Errors"):
//
//   ConfigError    bad user input: a file, a JSON key, a flag. The message names the place (file and
//                  JSON path, or the flag), what was expected and what was found.   -> exit 2
//   RuntimeError   the environment failed at run time: I/O, c10d, CUDA.             -> exit 3
//   InternalError  a broken invariant, i.e. a bug in cpt (thrown by CPT_CHECK).     -> exit 1
//
// A candidate plan that does not fit is not an error: the cost model returns Infeasible as a value.

#include <stdexcept>
#include <string>

namespace cpt::core {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  [[nodiscard]] virtual int exit_code() const = 0;
};

class ConfigError : public Error {
 public:
  using Error::Error;
  [[nodiscard]] int exit_code() const override { return 2; }
};

class RuntimeError : public Error {
 public:
  using Error::Error;
  [[nodiscard]] int exit_code() const override { return 3; }
};

class InternalError : public Error {
 public:
  using Error::Error;
  [[nodiscard]] int exit_code() const override { return 1; }
};

// Process exit codes (stable; scripts depend on them). DO NOT CHANGE.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitRuntime = 3;
// Stopped on request (SIGTERM, SIGINT) after a final checkpoint: `--resume` continues the run.
inline constexpr int kExitStopped = 4;

}  // namespace cpt::core
