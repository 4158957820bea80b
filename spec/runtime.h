#pragma once
// The software that runs a plan. The same parallel configuration runs at different speeds and in
// different memory under Megatron-LM, DeepSpeed, PyTorch FSDP, torchtitan and cpt's own executor:
// they fuse kernels differently, overlap different collectives and keep different copies of the
// model state. The cost model prices a plan for one of them (costmodel/runtime_profile.h says how
// each differs); plan.json records which ("priced_as").

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cpt::spec {

// Serialized as the strings of to_string. DO NOT CHANGE them.
enum class Runtime {
  kMegatron,    // Megatron-LM / NeMo / Megatron-Bridge (Transformer Engine kernels)
  kDeepSpeed,   // Megatron-DeepSpeed with DeepSpeed's ZeRO
  kFsdp,        // PyTorch FSDP with eager modules (Composer / llm-foundry, HF Accelerate)
  kTorchtitan,  // torchtitan: FSDP2, PyTorch SDPA
  kCpt,         // cpt's own LibTorch executor (`cpt train`)
};

std::string to_string(Runtime runtime);  // "megatron", "deepspeed", "fsdp", "torchtitan", "cpt"
// Every runtime's name, in the order of the enum (what a flag or a file may say).
std::vector<std::string> runtime_names();
// to_string's inverse; nullopt for any other string.
std::optional<Runtime> runtime_from_string(std::string_view name);

}  // namespace cpt::spec
