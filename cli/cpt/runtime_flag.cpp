#include "cli/cpt/runtime_flag.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/str_cat.h"

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

CLI::Option* add_moe_dispatcher_option(CLI::App& command, std::string& name) {
  return command
      .add_option("--moe-dispatcher", name,
                  "Mixtures of experts: how tokens reach their experts' ranks: alltoall (every (token, expert) "
                  "pair sent; Megatron-Core's alltoall, torchtitan's default) or flex (each token once per rank "
                  "and node that needs it: Megatron-Core's flex dispatcher with DeepEP or HybridEP)")
      ->capture_default_str()
      ->check(CLI::IsMember(spec::token_dispatcher_names()));
}

spec::TokenDispatcher moe_dispatcher_named(const std::string& name, spec::Runtime runtime) {
  const auto dispatcher = spec::token_dispatcher_from_string(name).value_or(spec::TokenDispatcher::kAllToAll);
  if (dispatcher == spec::TokenDispatcher::kFlex && runtime != spec::Runtime::kMegatron) {
    throw core::ConfigError(core::str_cat(
        "--moe-dispatcher: flex is Megatron-Core's dispatcher and the plan is for ", spec::to_string(runtime),
        ", which sends every (token, expert) pair by all-to-all; ", "expected alltoall, got flex"));
  }
  return dispatcher;
}

}  // namespace cpt::cli
