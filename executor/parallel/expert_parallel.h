#pragma once
// Expert parallelism (spec/rank_layout.h's expert axes, with etp 1): the E routed experts of each
// MoE layer split over the ep group, rank r holding experts [r·E/ep, (r+1)·E/ep) under their global
// names (layers.<i>.mlp.experts.<e>.*, so checkpoints, initialisation and Hugging Face names are
// the single process's). Each rank routes its own tokens; the (token, expert) pairs, sorted by
// expert, go to their experts' ranks by one all-to-all and the experts' outputs come back by a
// second (GShard, Lepikhin et al. 2020; Megatron-Core's alltoall token dispatcher), after an
// all-gather of every rank's pairs per expert tells each rank what it receives.
//
// Worked example, E = 4, ep = 2 (rank 0 holds experts 0-1, rank 1 experts 2-3); rank 0 routed
// pairs per expert [3, 1, 0, 2], rank 1 [1, 2, 2, 1]:
//   rank 0 sends 4 rows to itself and 2 to rank 1; receives 4 from itself and 3 from rank 1:
//   received rows [e0 e0 e0 e1 | e0 e1 e1], computed in local-expert order
//   by_expert = [0 1 2 4 | 3 5 6] (expert 0's 4 rows, then expert 1's 3), rows_per_local_expert [4, 3].
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct ExpertParallel {
  Communicator* group = nullptr;  // the ep group; null or a group of one: every expert on this rank
  [[nodiscard]] int size() const { return group != nullptr ? group->size() : 1; }
  [[nodiscard]] int rank() const { return group != nullptr ? group->rank() : 0; }
  [[nodiscard]] bool active() const { return size() > 1; }
};

// Where this rank's routed pairs go and what it computes (the example above).
struct ExpertDispatch {
  std::vector<std::int64_t> send_rows;              // [ep]: pairs sent to each rank
  std::vector<std::int64_t> recv_rows;              // [ep]: pairs received from each rank
  std::vector<std::int64_t> rows_per_local_expert;  // [E/ep]: rows each of this rank's experts computes
  torch::Tensor by_expert;  // int64 [received rows], on the pairs' device: the received rows in local-expert order
};

// `pairs_per_expert`: int64 [E], this rank's routed pairs of each expert (after any capacity
// drop), sorted by expert as they will be sent. COLLECTIVE over ep (one all-gather of [E] counts).
// REQUIRES: E divisible by ep.
ExpertDispatch plan_expert_dispatch(const torch::Tensor& pairs_per_expert, const ExpertParallel& ep);

// `rows` [Σ send_rows, ...] exchanged over `group` (Communicator::all_to_all): the result holds
// recv_rows[r] rows from rank r, in rank order. Differentiable: the gradient goes back by the
// reverse all-to-all. COLLECTIVE over the group, in forward and in backward.
torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                            const std::vector<std::int64_t>& recv_rows, Communicator& group);

}  // namespace cpt::exec
