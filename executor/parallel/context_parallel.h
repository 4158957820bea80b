#pragma once
// Context parallelism, all-gather form (Llama 3: Grattafiori et al. 2024 §3.3.2): each rank of the
// cp group holds S/cp tokens of every sequence (spec::SequenceSplit: chunks r and 2·cp − 1 − r, so
// causal work is even), runs embeddings, norms, projections, MLP and the loss on them alone, and
// before attention all-gathers the keys and values of the whole sequence (backward: their
// gradients reduce-scattered back to their owners). Its queries attend to them under the rows of
// the full mask that belong to its tokens. The parameters are replicated over cp, their gradients
// summed over dp × cp (spec::RankLayout::replica_group), as Megatron-LM does.
//
// Compared with ring attention (cost model, docs/costmodel.md) this moves the same K/V bytes in one
// collective instead of cp − 1 exposed-or-hidden steps; the all-gather holds the whole sequence's
// K and V per layer, which is small beside Q with grouped-query attention.
#include <torch/torch.h>

#include "executor/data/batch.h"
#include "executor/dist/communicator.h"

namespace cpt::exec {

struct ContextParallel {
  Communicator* group = nullptr;  // null, or a group of one: no context parallelism
  [[nodiscard]] int size() const { return group != nullptr ? group->size() : 1; }
  [[nodiscard]] int rank() const { return group != nullptr ? group->rank() : 0; }
  [[nodiscard]] bool active() const { return size() > 1; }
};

// This rank's tokens of `full` ([B, S] tensors): tokens, targets, positions (and real_tokens) of its two chunks,
// and the mask rows of its tokens against every key, [B, 1, S/cp, S] (from `full.mask`, or the
// causal mask when undefined); loss_tokens counts its own targets. `full` itself when cp is 1.
// ConfigError when S is not a multiple of 2·cp.
Batch context_parallel_slice(const Batch& full, const ContextParallel& cp);

// Keys or values of this rank's tokens [B, S/cp, ...] -> the whole sequence's [B, S, ...], in
// sequence order. Differentiable: the backward sums every rank's gradient and returns this rank's
// rows. COLLECTIVE over the group; the identity when cp is 1.
torch::Tensor gather_context(const torch::Tensor& local, const ContextParallel& cp);

}  // namespace cpt::exec
