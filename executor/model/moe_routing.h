#pragma once
// The bookkeeping of an MoE layer's routing (model/moe_mlp.h) over one microbatch: which experts
// its (token, expert) pairs chose, in the whole microbatch, and which pairs each expert keeps.
//
// Under sequence parallelism (parallel/tensor_parallel.h) a rank holds the tokens [B, S/tp] of
// every sequence of the microbatch, rank r the positions [r·S/tp, (r+1)·S/tp). The auxiliary loss
// and the capacity are the whole microbatch's, as in the single process: one all-gather over the
// group of each rank's pairs per (sequence, expert) and router-probability sums per expert (fp64
// [B + 1, E]) gives every rank the microbatch's counts, and the place of its own pairs in the
// microbatch's token order (b-major: sequence 0's S positions, then sequence 1's).
//
// Worked example, B = 2, tp = 2, one expert: rank 0 holds positions 0-3 of each sequence, rank 1
// positions 4-7; rank 0 routes [2, 1] pairs (sequence 0, 1) to the expert, rank 1 [3, 0]. In the
// microbatch's order the expert's pairs are s0·r0 (2), s0·r1 (3), s1·r0 (1), s1·r1 (0): rank 0's
// pair of sequence 1 is the expert's 6th, so with a capacity of 5 it is dropped. Its offset is
// 3 (rank 1's pairs of sequence 0, before it), added to its place among rank 0's own pairs (2).
#include <torch/torch.h>

#include <cstdint>

#include "executor/dist/communicator.h"

namespace cpt::exec {

// The routing of the whole microbatch (every sequence-parallel rank's tokens).
struct MicrobatchRouting {
  torch::Tensor chosen;        // int64 [E]: pairs that chose each expert, before any drop
  torch::Tensor local_chosen;  // int64 [E]: the same of this rank's tokens (`chosen` on whole sequences)
  // fp32 [E]: Σ over the microbatch's tokens of each expert's router probability, without gradient;
  // undefined on whole sequences (this rank's own sums are the microbatch's).
  torch::Tensor probability_sums;
  std::int64_t tokens = 0;           // T: the microbatch's tokens
  torch::Tensor offset_of_sequence;  // int64 [B, E] under sequence parallelism (else undefined): for this
                                     // rank's pairs of sequence b and expert e, the microbatch's pairs of
                                     // e ahead of them that are not this rank's own (the example above)
};

// `top_experts`: int64 [B·S_local, k], each token's chosen experts, of `sequences` (B) sequences;
// `probability_sums`: fp32 [E], Σ over this rank's tokens of each expert's router probability.
// `shards`: the sequence-parallel group, or null when this rank holds whole sequences. COLLECTIVE
// over `shards`.
MicrobatchRouting route_microbatch(const torch::Tensor& top_experts, std::int64_t sequences,
                                   const torch::Tensor& probability_sums, Communicator* shards);

// This rank's (token, expert) pairs sorted by expert (stable: token order inside each), without the
// pairs past each expert's `capacity` in the microbatch's token order (< 0: dropless).
struct KeptPairs {
  torch::Tensor token;       // int64 [N]: this rank's token of each kept pair
  torch::Tensor weight;      // fp32 [N]: its routing weight
  torch::Tensor per_expert;  // int64 [E]: kept pairs of each expert on this rank
};

// `top_experts`, `top_weights`: [T_local, k] = [B·S_local, k]; `tokens_per_sequence`: S_local.
KeptPairs keep_pairs(const torch::Tensor& top_experts, const torch::Tensor& top_weights,
                     const MicrobatchRouting& routing, std::int64_t capacity, std::int64_t tokens_per_sequence);

}  // namespace cpt::exec
