#pragma once
// LlamaModel: a LLaMA-family decoder built from spec::ModelSpec, or a pipeline stage of one
// (an optional embedding, blocks [first_layer, last_layer), an optional final norm and LM head).
// Parameter names are Hugging Face's without the "model." prefix: embed_tokens.weight,
// layers.<i>.self_attn.q_proj.weight, ..., norm.weight, lm_head.weight (absent when tied).
// The number of parameters of the whole model equals spec::ModelSpec::num_params() exactly
// (tests/executor/llama_model_test.cpp). Its only buffers are the MoE layers' expert biases
// (layers.<i>.mlp.gate.e_score_correction_bias, moe_mlp.h): checkpoints and Hugging Face weights
// carry them beside the parameters.
// With tensor parallelism (tensor_parallel.h) each rank holds its shards under the same names;
// forward() then returns this rank's vocabulary columns of the logits and loss_sum() reduces the
// cross-entropy over the group, so every rank of the group computes the same loss.
#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "executor/data/batch.h"
#include "executor/model/llama_blocks.h"
#include "executor/model/parameter_residency.h"
#include "executor/parallel/context_parallel.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::exec {

// Which part of the model this process holds. The default is the whole model.
struct StageShape {
  bool embedding = true;
  int first_layer = 0;
  int last_layer = -1;  // exclusive; -1 = all layers
  bool head = true;     // final norm + LM head
};

// ConfigError unless `m` is a model the executor builds: the LLaMA family (SwiGLU, RMSNorm, RoPE
// with an even head width), its attention grouped-query or DeepSeek's latent attention (an even
// rotary width, no q/k norms or biases).
void check_llama_family(const spec::ModelSpec& m);
// check_llama_family's reason, without the model's name; nullopt when the executor builds `m`.
std::optional<std::string> find_llama_family_error(const spec::ModelSpec& m);

class LlamaModelImpl : public torch::nn::Module {
 public:
  // ConfigError when `spec` is not LLaMA-family (SwiGLU, RMSNorm, RoPE, no biases): the executor
  // builds only those; GPT-style specs exist for the cost model's validation.
  // ConfigError too when heads, key/value heads or the FFN width are not divisible by tp.
  // With expert parallelism (expert_parallel.h) the MoE layers hold this rank's experts.
  // With context parallelism (context_parallel.h) every batch it is given holds this rank's tokens
  // (context_parallel_slice) and loss_sum() is this rank's part of the sum.
  explicit LlamaModelImpl(const spec::ModelSpec& spec, StageShape shape = {}, TensorParallel tp = {},
                          ContextParallel cp = {}, ExpertParallel ep = {});

  // Whole model: tokens [B, S] -> logits [B, S, vocab] (fp32 accumulation is the caller's choice);
  // with tensor parallelism [B, S, vocab columns of this rank] (from vocab_first_row(), padding
  // columns dropped).
  torch::Tensor forward(const Batch& batch);
  // Sum of the token cross-entropies of `batch` (ignoring kIgnoreIndex) as an fp32 scalar; divide
  // by the loss tokens of the whole step to get the mean.
  torch::Tensor loss_sum(const Batch& batch);
  // The same from logits of forward() or head() (vocabulary-parallel under tensor parallelism).
  torch::Tensor loss_sum_of_logits(const torch::Tensor& logits, const torch::Tensor& targets);

  // Stage pieces, for the pipeline executor: embed -> blocks -> head. With sequence parallelism
  // the hidden states between them are [B, S/tp, H] shards.
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor blocks(torch::Tensor hidden, const Batch& batch);
  torch::Tensor head(const torch::Tensor& hidden);

  // N(0, 0.02) for embeddings and linears, scaled by 1/sqrt(2·layers) for the two linears that
  // write into the residual stream (o_proj, down_proj; GPT-2), ones for norms. Deterministic in `seed`.
  void init_weights(std::uint64_t seed);

  // Activation recomputation during training (the plan's `recompute`): none, selective (the
  // attention core of every block) or full (every block). activation_checkpoint.h.
  void set_recompute(spec::Recompute recompute);

  // ZeRO-3: who gathers and releases the parameters around each unit (parameter_residency.h);
  // null (the default) for whole parameters. Only forward() and loss_sum() consult it.
  void set_parameter_residency(ParameterResidency* residency) { residency_ = residency; }

  // The mixture-of-experts MLPs of this part of the model (moe_mlp.h), with their global layer
  // index; empty for a dense model.
  [[nodiscard]] std::vector<std::pair<int, MoeMlpImpl*>> moe_layers();
  // The objective's weight of each MoE layer's auxiliary load-balancing loss per microbatch.
  void set_router_aux_loss_scale(double scale);
  // Whether that loss is each sequence's (moe_mlp.h) rather than the microbatch's.
  void set_router_aux_loss_per_sequence(bool per_sequence);

  [[nodiscard]] const spec::ModelSpec& spec() const { return spec_; }
  [[nodiscard]] const StageShape& shape() const { return shape_; }
  [[nodiscard]] const TensorParallel& tp() const { return tp_; }
  [[nodiscard]] const ContextParallel& cp() const { return cp_; }
  [[nodiscard]] const ExpertParallel& ep() const { return ep_; }
  // The groups its parameters are split over: tp, and expert-tp for the routed experts.
  [[nodiscard]] ParameterSplits splits() const { return {tp_, TensorParallel{ep_.etp}}; }
  // True when this process holds only part of the layers, the embedding or the head.
  [[nodiscard]] bool is_stage() const;
  // The first vocabulary id of this rank's embedding / LM-head rows (0 without tensor parallelism).
  [[nodiscard]] std::int64_t vocab_first_row() const;
  // This rank's part of the full tensor of parameter `name` (tensor_parallel.h).
  [[nodiscard]] torch::Tensor shard_of_full(const std::string& name, const torch::Tensor& full) const;

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when the embeddings are tied

 private:
  spec::ModelSpec spec_;
  StageShape shape_;
  TensorParallel tp_;
  ContextParallel cp_;
  ExpertParallel ep_;
  spec::Recompute recompute_ = spec::Recompute::kNone;
  ParameterResidency* residency_ = nullptr;
  RotaryTables rotary_;
};
TORCH_MODULE(LlamaModel);

// Puts modules in evaluation mode for its scope (is_training() false: no recomputation, and a
// mixture of experts records no routing statistics and adds no auxiliary loss), then restores
// each one's mode. For evaluation passes (which run without gradients).
class EvalModeGuard {
 public:
  explicit EvalModeGuard(std::vector<torch::nn::Module*> modules);
  ~EvalModeGuard();
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  std::vector<std::pair<torch::nn::Module*, bool>> restore_;
};

// Switches the mixture-of-experts terms off in `chunks` for its scope: no auxiliary loss in the
// gradients and no routing counted, the modules' training mode (and so recomputation) unchanged.
// For the EWC Fisher estimate, whose gradients are the cross-entropy's alone. A no-op for dense models.
class RouterTermsOff {
 public:
  explicit RouterTermsOff(std::vector<LlamaModelImpl*> chunks);
  ~RouterTermsOff();
  RouterTermsOff(const RouterTermsOff&) = delete;
  RouterTermsOff& operator=(const RouterTermsOff&) = delete;

 private:
  std::vector<std::pair<MoeMlpImpl*, double>> restore_;
};

// Σ of the token cross-entropies of `logits` [B, S, V] against `targets` [B, S] (kIgnoreIndex
// skipped), as an fp32 scalar.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets);

// Parameter names that take no weight decay (norm weights; biases if any).
bool is_no_decay_parameter(const std::string& name);

}  // namespace cpt::exec
