#pragma once
// `--runtime megatron|deepspeed|fsdp|torchtitan|cpt`, the same on every command that prices a
// plan (estimate, plan, whatif, advise, validate): which software runs it (spec/runtime.h,
// costmodel/runtime_profile.h).
#include <optional>
#include <string>

#include "spec/runtime.h"
#include "spec/token_dispatcher.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace cpt::cli {

// Adds --runtime to `command`, storing the name in `name`; `default_help` says what an absent
// flag means. A name outside the five is refused by CLI11 (one line naming the flag, exit 2).
CLI::Option* add_runtime_option(CLI::App& command, std::string& name, const std::string& default_help);

// `--fused-cross-entropy` (estimate, plan): the loss reads the 16-bit logits in one kernel and
// keeps no fp32 copy (cost::CostModelOptions::fused_cross_entropy), as llm-foundry's default does.
inline constexpr const char* kFusedCrossEntropyHelp =
    "The loss is a fused cross-entropy kernel that keeps no fp32 copy of the logits (FlashAttention's, "
    "llm-foundry's default): 2 bytes less per logit on the last stage";

// The runtime `name` names; nullopt when empty (the flag was not given).
std::optional<spec::Runtime> runtime_named(const std::string& name);

// `--moe-dispatcher alltoall|flex` (estimate, plan): how the runtime sends a mixture of experts'
// tokens to their experts (spec/token_dispatcher.h); default alltoall.
CLI::Option* add_moe_dispatcher_option(CLI::App& command, std::string& name);
// The dispatcher `name` names for plans priced for `runtime`. Throws core::ConfigError naming
// --moe-dispatcher when flex is asked of another runtime than Megatron-LM's (cpt's executor,
// DeepSpeed and torchtitan's exports dispatch pairs).
spec::TokenDispatcher moe_dispatcher_named(const std::string& name, spec::Runtime runtime);

}  // namespace cpt::cli
