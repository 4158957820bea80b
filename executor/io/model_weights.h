#pragma once
// Model weights in and out: cpt checkpoints and Hugging Face directories (config.json plus
// model.safetensors or sharded model-0000k-of-0000n.safetensors with model.safetensors.index.json),
// in bf16, fp16 or fp32. Names map one to one: Hugging Face's "model.<x>" is cpt's "<x>";
// "lm_head.weight" is the same in both; Mixtral's expert names (block_sparse_moe, w1/w2/w3) are
// renamed to cpt's (Qwen-MoE's: mlp.gate, mlp.experts.<e>.gate_proj/up_proj/down_proj).
#include <filesystem>
#include <string>

#include "executor/checkpoint/checkpoint.h"
#include "executor/model/llama_model.h"
#include "spec/model_spec.h"

namespace cpt::exec {

// True when `dir` looks like a Hugging Face model directory (has config.json and no cpt manifest).
bool is_hf_directory(const std::filesystem::path& dir);

// The ModelSpec of a Hugging Face directory. ConfigError for what the executor cannot compute the
// same way: a rope_scaling other than Llama 3.1's "llama3", sliding windows, non-SwiGLU activations.
spec::ModelSpec read_hf_model_spec(const std::filesystem::path& dir);

// Every weight of a Hugging Face directory under cpt names, as fp32 CPU tensors.
NamedTensors read_hf_weights(const std::filesystem::path& dir);

// What a checkpoint holds of `model`: its parameters, then its buffers (the expert biases).
NamedTensors checkpoint_tensors(LlamaModelImpl& model);

// Copies the weights at `source` (a cpt checkpoint directory or a Hugging Face directory) into
// `model`. ConfigError naming the source when a tensor the model needs is missing, has another
// shape, or the source holds tensors the model does not have (other pipeline stages' layers and,
// under expert parallelism, the experts of the other ranks of its ep group excepted). Returns a
// short description.
std::string load_model_weights(LlamaModelImpl& model, const std::filesystem::path& source);

// `cpt checkpoint export --format hf`: a cpt checkpoint -> config.json + model.safetensors (fp32),
// loadable by transformers' LlamaForCausalLM (Qwen2ForCausalLM with q/k/v biases, Qwen3ForCausalLM
// with q/k norms, MixtralForCausalLM or Qwen3MoeForCausalLM for a mixture of experts,
// DeepseekV2ForCausalLM or DeepseekV3ForCausalLM for latent attention; io/hf_export_config.h;
// ConfigError for a model none of them computes). Written atomically; `out_dir` must not exist.
void export_hf(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& out_dir);

// `cpt checkpoint import --format hf`: a Hugging Face directory -> a weights-only cpt checkpoint
// (step 0) at `out_dir`, which must not exist.
void import_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& out_dir);

}  // namespace cpt::exec
