#pragma once
// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM) and sequence parallelism (Korthikanti et
// al. 2022) for the LLaMA decoder: which parameters are split and how, and the differentiable
// collectives that join the split pieces.
//
// Splits (parameter names as in llama_model.h; W is [out, in] as in torch::nn::Linear):
//   rows (column-parallel linears, dim 0 split): q_proj, k_proj, v_proj (weight and bias), latent
//       attention's q_b_proj and kv_b_proj, gate_proj, up_proj: each rank computes a contiguous
//       block of heads / of the FFN width;
//   columns (row-parallel linears, dim 1 split): o_proj, down_proj: partial sums, then reduced;
//   vocabulary rows: embed_tokens and lm_head, [V, H] padded with zero rows to V_pad (for tp > 1 the
//       next multiple of 128·tp, spec::tp_padded_vocab, as Megatron-LM and the cost
//       model), rank r holding rows [r·V_pad/tp, (r+1)·V_pad/tp);
//   replicated: the RMSNorm weights, latent attention's down projections to its latents
//       (q_a_proj, kv_a_proj_with_mqa; model/latent_attention.h) and an MoE layer's router (its
//       shared experts are split as the dense MLP).
// The routed experts' gate/up/down projections split as rows / rows / columns too, but over the
// expert-tp group (spec::ParallelConfig::etp, Megatron-Core's parallel folding), not tp: a
// ParameterSplits names both groups, and without expert-tp every expert is whole on each rank.
// Checkpoints always hold the full, unpadded tensors, so they do not depend on the layout.
//
// The collectives (Megatron's mappings.py), forward / backward:
//   copy_to_tp             identity / all-reduce        (input of a column-parallel linear)
//   reduce_from_tp         all-reduce / identity        (output of a row-parallel linear)
//   gather_sequence        all-gather along S / reduce-scatter   (sequence parallel: into a TP region)
//   reduce_scatter_sequence reduce-scatter along S / all-gather  (sequence parallel: out of it)
// With sequence parallelism the norms run on [B, S/tp, H] shards and their weights' gradients are
// summed over the group by passing the weight through copy_to_tp.
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct TensorParallel {
  Communicator* group = nullptr;  // null, or a group of one: no tensor parallelism
  bool sequence_parallel = false;
  [[nodiscard]] int size() const { return group != nullptr ? group->size() : 1; }
  [[nodiscard]] int rank() const { return group != nullptr ? group->rank() : 0; }
  [[nodiscard]] bool active() const { return size() > 1; }
  [[nodiscard]] bool sp() const { return active() && sequence_parallel; }
};

enum class TpSplit { kReplicated, kRows, kColumns, kVocabRows };

// How the parameter `name` is split over its group (ParameterSplits::group_of).
TpSplit tp_split_of(const std::string& name);

// The groups a model's parameters are split over: tp, and for the routed experts expert-tp.
// Converts from a TensorParallel alone (experts whole), so code without experts apart passes tp.
struct ParameterSplits {
  TensorParallel tp;
  TensorParallel etp;  // the routed experts' group; null: each expert whole on this rank
  ParameterSplits(TensorParallel tensor = {}, TensorParallel expert_tensor = {})  // NOLINT: implicit from tp
      : tp(tensor), etp(expert_tensor) {}
  [[nodiscard]] const TensorParallel& group_of(const std::string& name) const;
};

// This rank's piece of the full (unpadded) tensor `full` of parameter `name`. `vocab` is the
// model's vocabulary (for the padding of kVocabRows). Returns `full` itself when its group is one rank.
torch::Tensor tp_shard_of_full(const std::string& name, const torch::Tensor& full, std::int64_t vocab,
                               const ParameterSplits& splits);

// The full tensor of parameter `name` from every rank's shard. COLLECTIVE over its group.
torch::Tensor tp_full_from_shards(const std::string& name, const torch::Tensor& shard, std::int64_t vocab,
                                  const ParameterSplits& splits);

// The full shape of parameter `name` whose shard on this rank has `local` sizes.
std::vector<std::int64_t> tp_full_shape(const std::string& name, c10::IntArrayRef local, std::int64_t vocab,
                                        const ParameterSplits& splits);

// Differentiable collectives (see above). Each is the identity for a group of one.
torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator& tp);
torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator& tp);
// [B, S/tp, ...] -> [B, S, ...] (rank r's rows are positions [r·S/tp, (r+1)·S/tp)).
torch::Tensor gather_sequence(const torch::Tensor& x, Communicator& tp);
// [B, S, ...] summed over the group -> this rank's [B, S/tp, ...].
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Communicator& tp);

// Into and out of a tensor-parallel region: copy_to_tp / reduce_from_tp, or with sequence
// parallelism gather_sequence / reduce_scatter_sequence; identities without tensor parallelism.
torch::Tensor enter_tp_region(const torch::Tensor& x, const TensorParallel& tp);
torch::Tensor leave_tp_region(const torch::Tensor& x, const TensorParallel& tp);

// Vocabulary-parallel pieces. `first_row`: the first vocabulary id of this rank's rows.
// Embedding lookup of `tokens` in this rank's rows (zeros for ids outside them), before the sum
// over the group.
torch::Tensor vocab_parallel_embedding_partial(const torch::Tensor& tokens, const torch::Tensor& weight,
                                               std::int64_t first_row);
// Σ over targets != kIgnoreIndex of the cross-entropy, from this rank's logits [B, S, V_r] over
// vocabulary ids [first_row, first_row + V_r): the global max and the softmax normaliser are
// reduced over the group. fp32 scalar, the same on every rank. COLLECTIVE.
torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                               std::int64_t first_row, Communicator& tp);
// log_softmax over the whole vocabulary of this rank's logits [B, S, V_r]; fp32. Its gradient is
// right for a loss that is the sum over the group's ranks of terms of their own columns (reduced
// with reduce_from_tp), as KL distillation's is. COLLECTIVE.
torch::Tensor vocab_parallel_log_softmax(const torch::Tensor& local_logits, Communicator& tp);

}  // namespace cpt::exec
