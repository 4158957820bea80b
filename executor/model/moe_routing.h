#pragma once
// The bookkeeping of an MoE layer's routing (model/moe_mlp.h) over one microbatch: which experts
// its (token, expert) pairs chose, in the whole microbatch, and which pairs each expert keeps.
//
// Under sequence parallelism (parallel/tensor_parallel.h) and context parallelism
// (parallel/context_parallel.h) the ranks that share a microbatch each hold some positions of every
// sequence, as runs of consecutive positions (spec::sequence_shard_runs: one or two per rank). The
// auxiliary loss and the capacity are the whole microbatch's, as in the single process: each rank
// counts its pairs per (sequence, run, expert) and sums its router probabilities per expert (fp64
// [B·R + 1, E], R the most runs of a rank; [B·R + B, E] with the sums per sequence, for the
// sequence-wise auxiliary loss; B·R more rows, the pairs of real tokens, under padding); one
// all-gather over the tp group, then one over the cp group, gives every rank every rank's rows, so
// the microbatch's counts and the place of its own pairs in the microbatch's token order (b-major:
// sequence 0's S positions, then sequence 1's).
//
// Worked example, B = 2, tp = 2 (cp 1), one expert: rank 0 holds positions 0-3 of each sequence,
// rank 1 positions 4-7; rank 0 routes [2, 1] pairs (sequence 0, 1) to the expert, rank 1 [3, 0]. In
// the microbatch's order the expert's pairs are s0·r0 (2), s0·r1 (3), s1·r0 (1), s1·r1 (0): rank 0's
// pair of sequence 1 is the expert's 6th, so with a capacity of 5 it is dropped. Its offset is the
// pairs ahead of its run in that order (2 + 3 = 5) less rank 0's own among them (2): 3, added to its
// place among rank 0's own pairs (2). Under context parallelism the runs of a sequence interleave
// the ranks (cp 2: rank 0 holds the first and last quarter), and the same sums apply.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "executor/dist/communicator.h"
#include "spec/sequence_split.h"

namespace cpt::exec {

// How the ranks that share a microbatch's sequences hold them, with the index tensors that
// route_microbatch reads, built once per layout.
struct SequenceShards {
  Communicator* sp = nullptr;       // sequence parallelism's group (gathered first), or null
  Communicator* cp = nullptr;       // context parallelism's group (gathered second), or null
  int shards = 1;                   // sp · cp ranks
  int self = 0;                     // this rank's shard: cp rank · sp + sp rank
  std::int64_t runs_per_shard = 1;  // R: the most runs a shard holds (the others pad with empty runs)
  torch::Tensor slot_order;         // int64 [shards·R]: the slots g·R + j in sequence order, empty ones last
  torch::Tensor own_slot_places;    // int64 [R]: where this rank's slots stand in slot_order
  torch::Tensor run_of_position;    // int64 [S_local]: the run of each of this rank's positions
};

// `runs`: every shard's runs (spec::sequence_shard_runs, or any split whose shards hold their
// positions in ascending order), `self` this rank's index in it; `sp`, `cp`: the groups whose
// gathers, sp first, give every shard's rows in shard order (size 1 or null when absent).
SequenceShards make_sequence_shards(const std::vector<std::vector<spec::PositionRun>>& runs, int self, Communicator* sp,
                                    Communicator* cp, const torch::Device& device);

// The routing of the whole microbatch (every sequence shard's tokens).
struct MicrobatchRouting {
  torch::Tensor chosen;        // int64 [E]: pairs that chose each expert, before any drop
  torch::Tensor local_chosen;  // int64 [E]: the same of this rank's tokens (`chosen` on whole sequences)
  // int64 [E]: `chosen` without the pairs of padding (`chosen` itself when there is none): the
  // load the auxiliary loss, the expert bias and the statistics count, as Megatron-Core's router
  // counts with a padding mask. Padding still takes its experts' capacity.
  torch::Tensor counted;
  torch::Tensor sequence_chosen;  // int64 [B, E]: `counted` per sequence (only when asked per sequence)
  // fp32 [E] and [B, E] (the latter only when asked per sequence): Σ over the microbatch's real
  // tokens (of each sequence) of each expert's router probability, without gradient; undefined on whole
  // sequences (this rank's own sums are the microbatch's).
  torch::Tensor probability_sums;
  torch::Tensor sequence_probability_sums;
  std::int64_t tokens = 0;  // T: the microbatch's tokens, padding included (the capacity's)
  // On sequence shards (else undefined): the row b·R + j of this rank's run j of sequence b for
  // each of its tokens, int64 [T_local]; and for this rank's pairs of each row and expert, the
  // microbatch's pairs of that expert ahead of them that are not this rank's own (the example
  // above), int64 [B·R, E].
  torch::Tensor row_of_token;
  torch::Tensor offset_of_row;
};

// Group-limited routing (DeepSeek-V3's node-limited routing as Megatron-Core runs it,
// --moe-router-num-groups / --moe-router-group-topk; DeepSeek-V2's group_limited_greedy scores a
// group by its best expert instead, the same when k/g = 1): the E experts in `groups` equal groups
// of consecutive experts, a group scored by the sum of its top k/g scores (k/g rounded down, as
// Megatron-Core), and a token's top k chosen among its best g =
// `groups_per_token` groups: `scores` [T, E] with every other group's entries -inf (for the choice
// only; the weights stay the scores themselves). Worked example, E = 4, 2 groups, g = 1, k = 2:
// scores [0.40 0.05 | 0.30 0.25] give group sums 0.45 and 0.55, so the token takes experts 2 and 3
// although expert 0 scores highest. REQUIRES: groups divides E, 1 <= g <= k, g·E/groups >= k.
torch::Tensor limit_to_best_groups(const torch::Tensor& scores, int groups, int groups_per_token, std::int64_t k);

// `top_experts`: int64 [B·S_local, k], each token's chosen experts, of `sequences` (B) sequences;
// `probability_sums`: fp32 [E], Σ over this rank's tokens of each expert's router probability, or
// [B, E] per sequence (then the result has the sequence_ fields); over real tokens only when
// there is padding.
// `shards`: how the microbatch is split, or null when this rank holds whole sequences. COLLECTIVE
// over its groups. `real_tokens`: bool [B·S_local], false at padding, or undefined (none).
MicrobatchRouting route_microbatch(const torch::Tensor& top_experts, std::int64_t sequences,
                                   const torch::Tensor& probability_sums, const SequenceShards* shards,
                                   const torch::Tensor& real_tokens = {});

// This rank's (token, expert) pairs sorted by expert (stable: token order inside each), without the
// pairs past each expert's `capacity` in the microbatch's token order (< 0: dropless).
struct KeptPairs {
  torch::Tensor token;       // int64 [N]: this rank's token of each kept pair
  torch::Tensor weight;      // fp32 [N]: its routing weight
  torch::Tensor per_expert;  // int64 [E]: kept pairs of each expert on this rank
};

// `top_experts`, `top_weights`: [T_local, k] = [B·S_local, k].
KeptPairs keep_pairs(const torch::Tensor& top_experts, const torch::Tensor& top_weights,
                     const MicrobatchRouting& routing, std::int64_t capacity);

}  // namespace cpt::exec
