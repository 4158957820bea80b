#include "executor/model/moe_routing.h"

namespace cpt::exec {

namespace {

// int64 [B, E]: pairs of each (sequence, expert) among `pairs_of_sequence` [B, S_local·k].
torch::Tensor pairs_per_sequence(const torch::Tensor& pairs_of_sequence, std::int64_t experts) {
  return torch::zeros({pairs_of_sequence.size(0), experts}, pairs_of_sequence.options())
      .scatter_add_(1, pairs_of_sequence, torch::ones_like(pairs_of_sequence));
}

// The offsets of the header from every rank's pairs `counts` [ranks, B, E], for rank `self`.
torch::Tensor offsets_of(const torch::Tensor& counts, int self) {
  const auto others = counts.sum(0) - counts[self];             // [B, E]: the other ranks' pairs
  const auto earlier_sequences = others.cumsum(0) - others;     // theirs in earlier sequences
  const auto earlier_ranks = counts.narrow(0, 0, self).sum(0);  // earlier ranks', same sequence (0 on rank 0)
  return earlier_sequences + earlier_ranks;
}

}  // namespace

MicrobatchRouting route_microbatch(const torch::Tensor& top_experts, std::int64_t sequences,
                                   const torch::Tensor& probability_sums, Communicator* shards) {
  const std::int64_t experts = probability_sums.size(0);
  const std::int64_t tokens = top_experts.size(0);
  MicrobatchRouting routing;
  if (shards == nullptr || shards->size() == 1) {
    routing.chosen = routing.local_chosen = torch::bincount(top_experts.reshape({-1}), {}, experts);
    routing.tokens = tokens;
    return routing;
  }
  const int ranks = shards->size();
  // [B + 1, E] fp64: pairs per (sequence, expert), exact below 2^53; then probability sums.
  const auto per_sequence = pairs_per_sequence(top_experts.reshape({sequences, -1}), experts);
  const auto mine =
      torch::cat({per_sequence.to(torch::kFloat64), probability_sums.detach().to(torch::kFloat64).unsqueeze(0)});
  auto every = torch::empty({ranks, sequences + 1, experts}, mine.options());
  shards->all_gather(mine, every)->wait();
  const auto counts = every.narrow(1, 0, sequences).round().to(torch::kInt64);  // [ranks, B, E]
  routing.chosen = counts.sum(std::vector<std::int64_t>{0, 1});
  routing.local_chosen = per_sequence.sum(0);
  routing.probability_sums = every.select(1, sequences).sum(0).to(torch::kFloat32);
  routing.tokens = tokens * ranks;
  routing.offset_of_sequence = offsets_of(counts, shards->rank());
  return routing;
}

KeptPairs keep_pairs(const torch::Tensor& top_experts, const torch::Tensor& top_weights,
                     const MicrobatchRouting& routing, std::int64_t capacity, std::int64_t tokens_per_sequence) {
  const std::int64_t k = top_experts.size(1), experts = routing.chosen.size(0);
  const auto expert_of_pair = top_experts.reshape({-1});
  const auto order = std::get<1>(expert_of_pair.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  KeptPairs pairs{torch::div(order, k, "floor"), top_weights.reshape({-1}).index_select(0, order),
                  routing.local_chosen};
  if (capacity < 0) return pairs;
  const auto sorted_experts = expert_of_pair.index_select(0, order);
  const auto run_start = pairs.per_expert.cumsum(0) - pairs.per_expert;  // [E]: each expert's first sorted pair
  auto position = torch::arange(order.size(0), order.options()) - run_start.index_select(0, sorted_experts);
  if (routing.offset_of_sequence.defined()) {
    const auto sequence = torch::div(pairs.token, tokens_per_sequence, "floor");
    position = position + routing.offset_of_sequence.index({sequence, sorted_experts});
  }
  const auto kept = (position < capacity).nonzero().squeeze(1);
  pairs.token = pairs.token.index_select(0, kept);
  pairs.weight = pairs.weight.index_select(0, kept);
  pairs.per_expert = torch::bincount(sorted_experts.index_select(0, kept), {}, experts);
  return pairs;
}

}  // namespace cpt::exec
