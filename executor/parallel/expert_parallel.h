#pragma once
// Expert parallelism (spec/rank_layout.h's expert axes): the E routed experts of each MoE layer
// split over the ep group, rank r holding experts [r·E/ep, (r+1)·E/ep) under their global names
// (layers.<i>.mlp.experts.<e>.*, so checkpoints, initialisation and Hugging Face names are the
// single process's). Each rank routes its own tokens; the (token, expert) pairs, sorted by expert,
// go to their experts' ranks by one all-to-all and the experts' outputs come back by a second
// (GShard, Lepikhin et al. 2020; Megatron-Core's alltoall token dispatcher), after an all-gather
// of every rank's pairs per expert tells each rank what it receives.
//
// Worked example, E = 4, ep = 2 (rank 0 holds experts 0-1, rank 1 experts 2-3); rank 0 routed
// pairs per expert [3, 1, 0, 2], rank 1 [1, 2, 2, 1]:
//   rank 0 sends 4 rows to itself and 2 to rank 1; receives 4 from itself and 3 from rank 1:
//   received rows [e0 e0 e0 e1 | e0 e1 e1], computed in local-expert order
//   by_expert = [0 1 2 4 | 3 5 6] (expert 0's 4 rows, then expert 1's 3), rows_per_local_expert [4, 3].
//
// Expert-tp (etp > 1; Megatron-Core's parallel folding): the etp ranks of an ep coordinate hold
// the same experts, each expert's gate/up rows and down columns split over them, and the counts
// are gathered over the ep × etp ranks. Each rank dispatches over its ep group (the ranks of its
// etp coordinate) as above; then the etp group gathers every member's received rows (each block
// in local-expert order), every member runs its slice of each expert on all of them, and each
// block's partial outputs go back to their member, summed (an all-gather and a reduce-scatter of
// uneven blocks, both as all-to-alls). With etp 2 in the example, the peer of rank 0 receiving
// rows [2, 1] per local expert: blocks [e0 e0 e0 e0 e1 e1 e1 | e0 e0 e1], etp_by_expert
// [0 1 2 3 7 8 | 4 5 6 9], rows_per_local_expert [6, 4].
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct ExpertParallel {
  Communicator* group = nullptr;  // the ep group; null or a group of one: every expert on this rank
  Communicator* etp = nullptr;    // the expert-tp group; null or a group of one: each expert whole
  // The ep × etp ranks (process_groups.h's ep_etp); null: the ep or etp group, whichever exceeds 1.
  Communicator* ep_etp = nullptr;
  [[nodiscard]] int size() const { return group != nullptr ? group->size() : 1; }
  [[nodiscard]] int rank() const { return group != nullptr ? group->rank() : 0; }
  [[nodiscard]] bool active() const { return size() > 1; }
  [[nodiscard]] int etp_size() const { return etp != nullptr ? etp->size() : 1; }
  [[nodiscard]] int etp_rank() const { return etp != nullptr ? etp->rank() : 0; }
  [[nodiscard]] bool splits_experts() const { return etp_size() > 1; }
  // Whether the routed pairs leave this rank (ep or etp > 1).
  [[nodiscard]] bool dispatches() const { return active() || splits_experts(); }
};

// Where this rank's routed pairs go and what it computes (the examples above).
struct ExpertDispatch {
  std::vector<std::int64_t> send_rows;  // [ep]: pairs sent to each rank
  std::vector<std::int64_t> recv_rows;  // [ep]: pairs received from each rank
  // [E/ep]: rows each of this rank's experts computes (with etp, its etp group's received rows)
  std::vector<std::int64_t> rows_per_local_expert;
  torch::Tensor by_expert;  // int64 [received rows], on the pairs' device: the received rows in local-expert order
  // With etp > 1 (else empty / undefined): [etp] the rows each member received, and int64 [their
  // sum]: the gathered blocks' rows in local-expert order.
  std::vector<std::int64_t> etp_rows;
  torch::Tensor etp_by_expert;
};

// `pairs_per_expert`: int64 [E], this rank's routed pairs of each expert (after any capacity
// drop), sorted by expert as they will be sent. COLLECTIVE over the ep × etp ranks (one
// all-gather of [E] counts). REQUIRES: E divisible by ep; ep.dispatches().
ExpertDispatch plan_expert_dispatch(const torch::Tensor& pairs_per_expert, const ExpertParallel& ep);

// `rows` [Σ send_rows, ...] exchanged over `group` (Communicator::all_to_all): the result holds
// recv_rows[r] rows from rank r, in rank order. Differentiable: the gradient goes back by the
// reverse all-to-all. COLLECTIVE over the group, in forward and in backward.
torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                            const std::vector<std::int64_t>& recv_rows, Communicator& group);

// `rows` [n, ...] of this member and every other member's `etp_rows` block, concatenated in member
// order (an all-gather of uneven blocks). Differentiable: each row's gradient is the sum of its
// copies'. COLLECTIVE over etp.
torch::Tensor gather_blocks(const torch::Tensor& rows, const std::vector<std::int64_t>& etp_rows, Communicator& etp);
// `partial` [Σ etp_rows, ...] summed over the members, this member's block (a reduce-scatter of
// uneven blocks; the inverse of gather_blocks). COLLECTIVE over etp.
torch::Tensor reduce_scatter_blocks(const torch::Tensor& partial, const std::vector<std::int64_t>& etp_rows,
                                    Communicator& etp);

}  // namespace cpt::exec
