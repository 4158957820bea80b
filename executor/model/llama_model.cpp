#include "executor/model/llama_model.h"

#include <cmath>

#include "core/error.h"
#include "core/hash.h"
#include "core/str_cat.h"
#include "executor/model/activation_checkpoint.h"
#include "executor/model/latent_attention.h"

namespace cpt::exec {

using core::str_cat;

namespace {

StageShape resolved(StageShape s, const spec::ModelSpec& m) {
  if (s.last_layer < 0) s.last_layer = m.layers;
  if (s.first_layer < 0 || s.first_layer > s.last_layer || s.last_layer > m.layers) {
    throw core::InternalError(
        str_cat("stage layers [", s.first_layer, ", ", s.last_layer, ") outside [0, ", m.layers, ")"));
  }
  return s;
}

}  // namespace

std::optional<std::string> find_llama_family_error(const spec::ModelSpec& m) {
  if (m.mlp != spec::MlpKind::kSwiGLU || m.norm != spec::NormKind::kRMSNorm ||
      m.position != spec::PositionKind::kRoPE) {
    return str_cat("the executor builds LLaMA-family models (mlp swiglu, norm rmsnorm, position rope); got mlp ",
                   spec::to_string(m.mlp), ", norm ", spec::to_string(m.norm), ", position ",
                   spec::to_string(m.position));
  }
  if (m.mla.present()) {
    if (m.qk_norm || m.qkv_bias) {
      return str_cat("latent attention has no q/k norms or q/k/v biases; got ", m.qk_norm ? "qk_norm" : "qkv_bias",
                     " true");
    }
    if (m.mla.qk_rope_head_dim % 2 != 0) {
      return str_cat("RoPE needs an even mla.qk_rope_head_dim; got ", m.mla.qk_rope_head_dim);
    }
    return std::nullopt;
  }
  if (m.head_dim() % 2 != 0) return str_cat("RoPE needs an even head_dim; got ", m.head_dim());
  return std::nullopt;
}

void check_llama_family(const spec::ModelSpec& m) {
  if (const auto e = find_llama_family_error(m)) throw core::ConfigError(str_cat("model ", m.name, ": ", *e));
}

LlamaModelImpl::LlamaModelImpl(const spec::ModelSpec& spec, StageShape shape, TensorParallel tp, ContextParallel cp,
                               ExpertParallel ep)
    : spec_(spec),
      shape_(resolved(shape, spec)),
      tp_(tp),
      cp_(cp),
      ep_(ep),
      rotary_(spec.rotary_dim(), spec.max_seq_len, spec.rope_theta, spec.rope_scaling) {
  check_llama_family(spec_);
  const int t = tp_.size();
  if (spec_.heads % t != 0 || spec_.kv_heads % t != 0 || spec_.ffn_hidden % t != 0) {
    throw core::ConfigError(str_cat("model ", spec_.name, ": tensor parallelism ", t, " needs heads (", spec_.heads,
                                    "), key/value heads (", spec_.kv_heads, ") and ffn_hidden (", spec_.ffn_hidden,
                                    ") divisible by it"));
  }
  const std::int64_t vocab_rows = spec_.tp_padded_vocab(t) / t;
  // Tied embeddings need the embedding on the head's stage too: only single-stage for now.
  if (spec_.tied_embeddings && shape_.embedding != shape_.head) {
    throw core::ConfigError(str_cat("model ", spec_.name, ": tied embeddings need the embedding and the LM head ",
                                    "on the same pipeline stage"));
  }
  if (shape_.embedding) embed_tokens = register_module("embed_tokens", torch::nn::Embedding(vocab_rows, spec_.hidden));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < spec_.layers; ++i) {
    // Absent layers are placeholders so that names keep the global layer index (layers.<i>.*).
    if (i >= shape_.first_layer && i < shape_.last_layer) {
      layers->push_back(DecoderBlock(spec_, i, tp_, cp_, ep_));
    } else {
      layers->push_back(torch::nn::Identity());
    }
  }
  if (shape_.head) {
    norm = register_module("norm", RMSNorm(spec_.hidden, spec_.norm_eps, tp_.sp() ? tp_.group : nullptr));
    if (!spec_.tied_embeddings) {
      lm_head =
          register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(spec_.hidden, vocab_rows).bias(false)));
    }
  }
}

bool LlamaModelImpl::is_stage() const {
  return !shape_.embedding || !shape_.head || shape_.first_layer != 0 || shape_.last_layer != spec_.layers;
}

std::int64_t LlamaModelImpl::vocab_first_row() const {
  return tp_.rank() * (spec_.tp_padded_vocab(tp_.size()) / tp_.size());
}

torch::Tensor LlamaModelImpl::shard_of_full(const std::string& name, const torch::Tensor& full) const {
  return tp_shard_of_full(name, full, spec_.vocab, splits());
}

torch::Tensor LlamaModelImpl::embed(const torch::Tensor& tokens) {
  if (!tp_.active()) return embed_tokens(tokens);
  // Each rank looks up its rows; the sum over the group (or its sequence shards) is the embedding.
  return leave_tp_region(vocab_parallel_embedding_partial(tokens, embed_tokens->weight, vocab_first_row()), tp_);
}

torch::Tensor LlamaModelImpl::blocks(torch::Tensor hidden, const Batch& batch) {
  const auto [cos, sin] = rotary_.lookup(batch.positions, hidden.scalar_type());
  const bool full = recompute_ == spec::Recompute::kFull && is_training() && torch::GradMode::is_enabled();
  // The padding of the blocks' positions: under sequence parallelism this rank's consecutive
  // 1/tp of the batch's (context-parallel) positions (reduce_scatter_sequence's split).
  auto real_tokens = batch.real_tokens;
  if (real_tokens.defined() && real_tokens.size(1) != hidden.size(1)) {
    real_tokens = real_tokens.narrow(1, tp_.rank() * hidden.size(1), hidden.size(1));
  }
  for (int i = shape_.first_layer; i < shape_.last_layer; ++i) {
    auto& block = *layers->ptr<DecoderBlockImpl>(static_cast<std::size_t>(i));
    if (residency_ != nullptr) residency_->before_forward(i);
    hidden = full ? checkpointed_block(block, hidden, cos, sin, batch.mask, real_tokens)
                  : block.forward(hidden, cos, sin, batch.mask, real_tokens);
    if (residency_ != nullptr) hidden = residency_->after_forward(i, hidden);
  }
  return hidden;
}

torch::Tensor LlamaModelImpl::head(const torch::Tensor& hidden) {
  const auto h = enter_tp_region(norm(hidden), tp_);
  auto logits = spec_.tied_embeddings ? torch::nn::functional::linear(h, embed_tokens->weight) : lm_head(h);
  if (tp_.active()) {  // drop the padding rows' columns
    const auto real = std::min<std::int64_t>(spec_.vocab - vocab_first_row(), logits.size(-1));
    if (real < logits.size(-1)) logits = logits.narrow(-1, 0, real);
  }
  return logits;
}

torch::Tensor LlamaModelImpl::forward(const Batch& batch) {
  if (residency_ == nullptr) return head(blocks(embed(batch.tokens), batch));
  residency_->before_forward(ParameterResidency::kRoot);
  return residency_->after_forward(ParameterResidency::kRoot, head(blocks(embed(batch.tokens), batch)));
}

torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
}

torch::Tensor LlamaModelImpl::loss_sum(const Batch& batch) {
  return loss_sum_of_logits(forward(batch), batch.targets);
}

torch::Tensor LlamaModelImpl::loss_sum_of_logits(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (tp_.active()) return vocab_parallel_cross_entropy_sum(logits, targets, vocab_first_row(), *tp_.group);
  return cross_entropy_sum(logits, targets);
}

void LlamaModelImpl::init_weights(std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * spec_.layers);
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    auto& t = p.value();
    // Drawn on the CPU from a generator seeded by (seed, parameter name), whatever the device and
    // whichever part of the model this process holds: a pipeline stage or a shard gets exactly
    // the weights the whole model would have.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ core::fnv1a64(name));
    // A tensor-parallel shard is cut from the whole tensor, drawn the same way.
    const auto full = tp_full_shape(name, t.sizes(), spec_.vocab, splits());
    torch::Tensor values;
    if (name.ends_with(".bias")) {
      values = torch::zeros(full, torch::kFloat32);
    } else if (is_no_decay_parameter(name)) {
      values = torch::ones(full, torch::kFloat32);
    } else {
      const bool residual = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
      values = at::normal(0.0, residual ? residual_std : 0.02, full, gen, torch::TensorOptions(torch::kFloat32));
    }
    t.copy_(shard_of_full(name, values));
  }
}

void LlamaModelImpl::set_recompute(spec::Recompute recompute) {
  recompute_ = recompute;
  for (int i = shape_.first_layer; i < shape_.last_layer; ++i) {
    auto* block = layers->ptr<DecoderBlockImpl>(static_cast<std::size_t>(i)).get();
    const bool selective = recompute == spec::Recompute::kSelective;
    if (block->latent_attn) {
      block->latent_attn->recompute_core = selective;
    } else {
      block->self_attn->recompute_core = selective;
    }
  }
}

std::vector<std::pair<int, MoeMlpImpl*>> LlamaModelImpl::moe_layers() {
  std::vector<std::pair<int, MoeMlpImpl*>> found;
  for (int i = shape_.first_layer; i < shape_.last_layer; ++i) {
    auto& block = *layers->ptr<DecoderBlockImpl>(static_cast<std::size_t>(i));
    if (block.moe) found.emplace_back(i, block.moe.get());
  }
  return found;
}

void LlamaModelImpl::set_router_aux_loss_scale(double scale) {
  for (auto& [layer, moe] : moe_layers()) moe->set_aux_loss_scale(scale);
}

void LlamaModelImpl::set_router_aux_loss_per_sequence(bool per_sequence) {
  for (auto& [layer, moe] : moe_layers()) moe->set_aux_loss_per_sequence(per_sequence);
}

EvalModeGuard::EvalModeGuard(std::vector<torch::nn::Module*> modules) {
  for (auto* m : modules) {
    restore_.emplace_back(m, m->is_training());
    m->eval();
  }
}

EvalModeGuard::~EvalModeGuard() {
  for (auto& [m, training] : restore_) m->train(training);
}

RouterTermsOff::RouterTermsOff(std::vector<LlamaModelImpl*> chunks) {
  for (auto* chunk : chunks) {
    for (auto& [layer, moe] : chunk->moe_layers()) {
      restore_.emplace_back(moe, moe->aux_loss_scale());
      moe->set_aux_loss_scale(0);
      moe->set_recording(false);
    }
  }
}

RouterTermsOff::~RouterTermsOff() {
  for (auto& [moe, scale] : restore_) {
    moe->set_aux_loss_scale(scale);
    moe->set_recording(true);
  }
}

bool is_no_decay_parameter(const std::string& name) {
  return name.ends_with("norm.weight") || name.ends_with(".bias");
}

}  // namespace cpt::exec
