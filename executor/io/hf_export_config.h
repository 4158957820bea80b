#pragma once
// The transformers class a cpt model exports as, and that class's config.json
// (`cpt checkpoint export --format hf`, io/model_weights.h). The weights keep their names
// (Hugging Face's "model." prefix added; Mixtral's expert names, io/model_weights.cpp).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "spec/model_spec.h"

namespace cpt::exec {

// LLaMA; Qwen2 for q/k/v biases (Llama's attention_bias would add one to o_proj too); Qwen3 for
// q/k norms; a mixture of experts as Mixtral, or as Qwen3-MoE with q/k norms; latent attention as
// DeepSeek-V2, or as DeepSeek-V3 with a sigmoid router.
enum class HfFamily { kLlama, kQwen2, kQwen3, kMixtral, kQwen3Moe, kDeepseekV2, kDeepseekV3 };

// The class that computes `m` as cpt's executor does. ConfigError naming `origin` and what the
// nearest class computes otherwise, for a model none of them computes.
HfFamily hf_family_of(const spec::ModelSpec& m, const std::filesystem::path& origin);

// transformers' config.json of `m` as `family` (fp32 weights).
nlohmann::ordered_json hf_config_of(const spec::ModelSpec& m, HfFamily family);

}  // namespace cpt::exec
