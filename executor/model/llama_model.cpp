#include "executor/model/llama_model.h"

#include <cmath>

#include "core/error.h"
#include "core/hash.h"
#include "core/str_cat.h"
#include "executor/model/activation_checkpoint.h"

namespace cpt::exec {

using core::str_cat;

namespace {

void require_llama_family(const spec::ModelSpec& m) {
  if (m.mlp != spec::MlpKind::kSwiGLU || m.norm != spec::NormKind::kRMSNorm ||
      m.position != spec::PositionKind::kRoPE) {
    throw core::ConfigError(str_cat("model ", m.name, ": the executor builds LLaMA-family models (mlp swiglu, norm ",
                                    "rmsnorm, position rope); got mlp ", spec::to_string(m.mlp), ", norm ",
                                    spec::to_string(m.norm), ", position ", spec::to_string(m.position)));
  }
  if (m.head_dim() % 2 != 0) {
    throw core::ConfigError(str_cat("model ", m.name, ": RoPE needs an even head_dim; got ", m.head_dim()));
  }
}

StageShape resolved(StageShape s, const spec::ModelSpec& m) {
  if (s.last_layer < 0) s.last_layer = m.layers;
  if (s.first_layer < 0 || s.first_layer > s.last_layer || s.last_layer > m.layers) {
    throw core::InternalError(str_cat("stage layers [", s.first_layer, ", ", s.last_layer, ") outside [0, ", m.layers, ")"));
  }
  return s;
}

}  // namespace

LlamaModelImpl::LlamaModelImpl(const spec::ModelSpec& spec, StageShape shape)
    : spec_(spec), shape_(resolved(shape, spec)), rotary_(spec.head_dim(), spec.max_seq_len, spec.rope_theta) {
  require_llama_family(spec_);
  // Tied embeddings need the embedding on the head's stage too: only single-stage for now.
  if (spec_.tied_embeddings && shape_.embedding != shape_.head) {
    throw core::ConfigError(str_cat("model ", spec_.name, ": tied embeddings need the embedding and the LM head ",
                                    "on the same pipeline stage"));
  }
  if (shape_.embedding) embed_tokens = register_module("embed_tokens", torch::nn::Embedding(spec_.vocab, spec_.hidden));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < spec_.layers; ++i) {
    // Absent layers are placeholders so that names keep the global layer index (layers.<i>.*).
    if (i >= shape_.first_layer && i < shape_.last_layer) {
      layers->push_back(DecoderBlock(spec_));
    } else {
      layers->push_back(torch::nn::Identity());
    }
  }
  if (shape_.head) {
    norm = register_module("norm", RMSNorm(spec_.hidden, spec_.norm_eps));
    if (!spec_.tied_embeddings) {
      lm_head = register_module(
          "lm_head", torch::nn::Linear(torch::nn::LinearOptions(spec_.hidden, spec_.vocab).bias(false)));
    }
  }
}

torch::Tensor LlamaModelImpl::embed(const torch::Tensor& tokens) { return embed_tokens(tokens); }

torch::Tensor LlamaModelImpl::blocks(torch::Tensor hidden, const Batch& batch) {
  const auto [cos, sin] = rotary_.lookup(batch.positions, hidden.scalar_type());
  const bool full = recompute_ == spec::Recompute::kFull && is_training() && torch::GradMode::is_enabled();
  for (int i = shape_.first_layer; i < shape_.last_layer; ++i) {
    auto& block = *layers->ptr<DecoderBlockImpl>(static_cast<std::size_t>(i));
    hidden = full ? checkpointed_block(block, hidden, cos, sin, batch.mask) : block.forward(hidden, cos, sin, batch.mask);
  }
  return hidden;
}

torch::Tensor LlamaModelImpl::head(const torch::Tensor& hidden) {
  const auto h = norm(hidden);
  return spec_.tied_embeddings ? torch::nn::functional::linear(h, embed_tokens->weight) : lm_head(h);
}

torch::Tensor LlamaModelImpl::forward(const Batch& batch) {
  return head(blocks(embed(batch.tokens), batch));
}

torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
}

torch::Tensor LlamaModelImpl::loss_sum(const Batch& batch) { return cross_entropy_sum(forward(batch), batch.targets); }

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
    torch::Tensor values;
    if (name.ends_with(".bias")) {
      values = torch::zeros(t.sizes(), torch::kFloat32);
    } else if (is_no_decay_parameter(name)) {
      values = torch::ones(t.sizes(), torch::kFloat32);
    } else {
      const bool residual = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
      values = at::normal(0.0, residual ? residual_std : 0.02, t.sizes(), gen, torch::TensorOptions(torch::kFloat32));
    }
    t.copy_(values);
  }
}

void LlamaModelImpl::set_recompute(spec::Recompute recompute) {
  recompute_ = recompute;
  for (int i = shape_.first_layer; i < shape_.last_layer; ++i) {
    layers->ptr<DecoderBlockImpl>(static_cast<std::size_t>(i))->self_attn->recompute_core =
        recompute == spec::Recompute::kSelective;
  }
}

bool is_no_decay_parameter(const std::string& name) {
  return name.ends_with("norm.weight") || name.ends_with(".bias");
}

}  // namespace cpt::exec
