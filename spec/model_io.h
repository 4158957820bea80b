#pragma once
// Reading and writing ModelSpec. Two input formats, accepted wherever a model is named:
//
//   cpt model JSON      exactly the keys name, layers, hidden, heads, kv_heads, ffn_hidden, vocab,
//                       mlp, norm, position, tied_embeddings, max_seq_len (docs/model_format.md)
//   Hugging Face        a config.json of a LlamaForCausalLM, MistralForCausalLM or
//                       Qwen2ForCausalLM checkpoint (recognised by its "model_type" key)
//
// All errors are ConfigError naming the file and the JSON path.

#include <filesystem>
#include <optional>
#include <string>

#include "core/json_reader.h"
#include "spec/model_spec.h"

namespace cpt::spec {

// cpt's own format. Unknown keys are rejected. `reader` is finished on return.
ModelSpec model_from_json(core::JsonObjectReader& reader);
core::Json model_to_json(const ModelSpec& m);

// The first field (in model JSON's names, "moe.experts") where `ours` and `theirs` differ, as
// "moe.experts 4 against 8"; empty when their model JSON is the same.
std::string first_model_difference(const ModelSpec& ours, const ModelSpec& theirs);

// The same for the fields that shape the parameters (layers, widths, heads, vocabulary, biases,
// norms, experts and their layers, latent attention; the position table with learned positions):
// empty when weights of `ours` load into `theirs` (its name, RoPE, epsilon, context length and
// routing may differ, as a continual run's may from the weights it starts from, and the dense
// MLP's width where no layer of either is dense; not the expert bias, a tensor of its own).
std::string first_shape_difference(const ModelSpec& ours, const ModelSpec& theirs);

// A Hugging Face config.json. Keys that do not change the parameter layout (token ids, dtype,
// rope scaling, ...) are ignored; keys that would change it in ways cpt does not model
// (attention_bias or mlp_bias true, head_dim != hidden/heads, hidden_act other than silu) are
// errors. `fallback_name` names the model when the config has no "_name_or_path".
ModelSpec model_from_hf_config(core::JsonObjectReader& reader, const std::string& fallback_name);

// Loads a model named on the command line: a catalog name or alias (e.g. "llama3-8b"), the path of
// a JSON file in either format, or a directory load_model_directory reads. `flag` names the option
// for error messages ("--model").
ModelSpec load_model(const std::string& name_or_path, const std::string& flag);
// The model of a Hugging Face directory (its config.json) or of a cpt checkpoint (its
// manifest.json's "model"; executor/checkpoint/checkpoint_manifest.h has the format), read without
// the weights; nullopt when `dir` is not a directory or holds neither file. ConfigError for a file
// it cannot read.
std::optional<ModelSpec> load_model_directory(const std::filesystem::path& dir);
ModelSpec load_model_file(const std::filesystem::path& path);

}  // namespace cpt::spec
