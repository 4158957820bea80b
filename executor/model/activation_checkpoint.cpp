#include "executor/model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>

#include <cstdint>
#include <optional>

#include "executor/model/llama_blocks.h"

namespace cpt::exec {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local int t_recomputing = 0;

// Re-enables the graph and computes the gradients of `outputs` w.r.t. the detached copies of the
// inputs (and, as a side effect, of every parameter used).
variable_list recompute_and_backward(const std::function<torch::Tensor(const variable_list&)>& fn,
                                     const variable_list& inputs, const torch::Tensor& grad_output) {
  variable_list detached;
  for (const auto& t : inputs) detached.push_back(t.defined() ? t.detach().requires_grad_(t.is_floating_point()) : t);
  torch::Tensor out;
  {
    torch::AutoGradMode enable(true);
    ++t_recomputing;
    try {
      out = fn(detached);
    } catch (...) {
      --t_recomputing;
      throw;
    }
    --t_recomputing;
  }
  torch::autograd::backward({out}, {grad_output});
  variable_list grads;
  for (const auto& t : detached) grads.push_back(t.defined() && t.requires_grad() ? t.grad() : torch::Tensor());
  return grads;
}

// Autocast keeps each fp32 weight's bf16 copy for reuse while it is on (at::autocast's cast
// cache). In LibTorch versions whose cache also took copies made with grad mode off (PyTorch issue
// 112583; the pinned 2.11 no longer does), a copy made in the checkpointed forward had no history,
// and the recomputation in backward reused it and cut the weights off their gradients, silently.
// The checkpointed forward casts without the cache, whatever LibTorch cpt is built against.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(previous_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool previous_;
};

struct BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
  // `mask` and `real_tokens` are empty placeholders when has_mask / has_real_tokens are false
  // (apply() cannot take undefined tensors).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& mask, bool has_mask,
                               const torch::Tensor& real_tokens, bool has_real_tokens, std::int64_t block) {
    // The block lives as long as the model, which outlives every step's graph.
    ctx->saved_data["block"] = block;
    ctx->saved_data["has_mask"] = has_mask;
    ctx->saved_data["has_real_tokens"] = has_real_tokens;
    ctx->save_for_backward({x, cos, sin, mask, real_tokens});
    const AutocastCacheOff no_cache;
    return reinterpret_cast<DecoderBlockImpl*>(block)->forward(x, cos, sin, has_mask ? mask : torch::Tensor(),
                                                               has_real_tokens ? real_tokens : torch::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = reinterpret_cast<DecoderBlockImpl*>(ctx->saved_data["block"].toInt());
    auto saved = ctx->get_saved_variables();
    const auto cos = saved[1], sin = saved[2];
    const auto mask = ctx->saved_data["has_mask"].toBool() ? saved[3] : torch::Tensor();
    const auto real_tokens = ctx->saved_data["has_real_tokens"].toBool() ? saved[4] : torch::Tensor();
    const auto grads = recompute_and_backward(
        [&](const variable_list& in) { return block->forward(in[0], cos, sin, mask, real_tokens); }, {saved[0]},
        grad_out[0]);
    return {grads[0],        torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct AttentionCoreCheckpoint : public torch::autograd::Function<AttentionCoreCheckpoint> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask, bool has_mask, bool gqa,
                               double scale) {
    ctx->saved_data["gqa"] = gqa;
    ctx->saved_data["has_mask"] = has_mask;
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({q, k, v, mask});
    return attention_core(q, k, v, has_mask ? mask : torch::Tensor(), gqa, scale);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const bool gqa = ctx->saved_data["gqa"].toBool();
    const bool has_mask = ctx->saved_data["has_mask"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    auto saved = ctx->get_saved_variables();
    const auto mask = has_mask ? saved[3] : torch::Tensor();
    const auto grads = recompute_and_backward(
        [&](const variable_list& in) { return attention_core(in[0], in[1], in[2], mask, gqa, scale); },
        {saved[0], saved[1], saved[2]}, grad_out[0]);
    return {grads[0], grads[1], grads[2], torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor placeholder(const torch::Tensor& like) {
  return torch::empty({0}, like.options().dtype(torch::kBool));
}

}  // namespace

torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& mask, bool gqa, double scale) {
  const std::optional<double> factor = scale > 0 ? std::optional<double>(scale) : std::nullopt;
  if (mask.defined() && gqa && q.is_cuda()) {
    // On CUDA the flash kernel takes no mask and the memory-efficient one no grouped K/V: with
    // both, SDPA would fall back to its math path (the B·A·S² scores in fp32). K and V repeated
    // to the query heads keep the memory-efficient kernel. (The CPU's flash kernel takes both.)
    const auto groups = q.size(1) / k.size(1);
    return at::scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), mask,
                                            0.0, /*is_causal=*/false, factor, /*enable_gqa=*/false);
  }
  if (mask.defined()) return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, factor, gqa);
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, factor, gqa);
}

bool in_recomputation() {
  return t_recomputing > 0;
}

torch::Tensor checkpointed_block(DecoderBlockImpl& block, const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin, const torch::Tensor& mask,
                                 const torch::Tensor& real_tokens) {
  return BlockCheckpoint::apply(x, cos, sin, mask.defined() ? mask : placeholder(x), mask.defined(),
                                real_tokens.defined() ? real_tokens : placeholder(x), real_tokens.defined(),
                                reinterpret_cast<std::int64_t>(&block));
}

torch::Tensor checkpointed_attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& mask, bool gqa, double scale) {
  return AttentionCoreCheckpoint::apply(q, k, v, mask.defined() ? mask : placeholder(q), mask.defined(), gqa, scale);
}

}  // namespace cpt::exec
