#pragma once
// Activation checkpointing (recomputation) as custom autograd functions, the reentrant scheme of
// torch.utils.checkpoint: the forward runs without recording the graph and keeps only its inputs;
// backward re-runs the forward with the graph on and back-propagates through it (parameter
// gradients accumulate as usual, so data-parallel hooks still see them).
//   full       a whole decoder block (Chen et al. 2016; Megatron's full recompute)
//   selective  the attention core only (softmax(QKᵀ)V), the large but cheap part (Korthikanti et
//              al. 2022 §4.1)
// No dropout runs in cpt's model, so no RNG state needs restoring; autocast is dispatcher-level and
// the same in the recomputation because backward runs inside the trainer's AutocastGuard.
#include <torch/torch.h>

namespace cpt::exec {

class DecoderBlockImpl;

// block.forward(x, cos, sin, mask, real_tokens) with recomputation in backward.
torch::Tensor checkpointed_block(DecoderBlockImpl& block, const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin, const torch::Tensor& mask,
                                 const torch::Tensor& real_tokens = {});

// scaled_dot_product_attention(q, k, v, mask or causal, enable_gqa, scale) with recomputation in
// backward.
torch::Tensor checkpointed_attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& mask, bool gqa, double scale = 0);

// True while a checkpointed function's forward is being re-run for backward (on this thread): the
// second forward of the same microbatch, which statistics must not count again.
bool in_recomputation();

// The attention core itself (shared by the plain and the checkpointed paths). `scale`: the
// scores' factor, 0 for SDPA's 1/sqrt(q.size(-1)).
torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& mask, bool gqa, double scale = 0);

}  // namespace cpt::exec
