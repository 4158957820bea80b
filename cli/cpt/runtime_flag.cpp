#include "cli/cpt/runtime_flag.h"

#include <CLI/CLI.hpp>

namespace cpt::cli {

CLI::Option* add_runtime_option(CLI::App& command, std::string& name, const std::string& default_help) {
  return command
      .add_option("--runtime", name,
                  "The software that runs the plan: megatron (Megatron-LM, Transformer Engine), deepspeed, fsdp "
                  "(PyTorch FSDP), torchtitan or cpt (cpt's executor); " +
                      default_help)
      ->check(CLI::IsMember(spec::runtime_names()));
}

std::optional<spec::Runtime> runtime_named(const std::string& name) {
  if (name.empty()) return std::nullopt;
  return spec::runtime_from_string(name);
}

}  // namespace cpt::cli
