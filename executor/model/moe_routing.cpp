#include "executor/model/moe_routing.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace cpt::exec {

namespace {

torch::Tensor index_tensor(const std::vector<std::int64_t>& values, const torch::Device& device) {
  return torch::tensor(values, torch::kInt64).to(device);
}

// `mine` [rows, E] of every shard, [shards, rows, E] in shard order: gathered over sp, then cp.
torch::Tensor gather_shards(const torch::Tensor& mine, const SequenceShards& shards) {
  auto every = mine.unsqueeze(0);
  for (Communicator* group : {shards.sp, shards.cp}) {
    if (group == nullptr || group->size() == 1) continue;
    std::vector<std::int64_t> sizes{group->size()};
    sizes.insert(sizes.end(), every.sizes().begin(), every.sizes().end());
    auto gathered = torch::empty(sizes, every.options());
    group->all_gather(every, gathered)->wait();
    every = gathered.view({-1, mine.size(0), mine.size(1)});
  }
  return every;
}

// For this rank's pairs of each row b·R + j and expert: the microbatch's pairs of the expert in
// the rows ahead of it in sequence order, less this rank's own among them. `counts`: every shard's
// pairs [G, B·R, E]; `own`: this rank's [B·R, E].
torch::Tensor offsets_of(const torch::Tensor& counts, const torch::Tensor& own, const SequenceShards& shards) {
  const std::int64_t runs = shards.runs_per_shard, experts = counts.size(2);
  const std::int64_t sequences = counts.size(1) / runs;
  const auto in_order = counts.view({shards.shards, sequences, runs, experts})
                            .permute({1, 0, 2, 3})
                            .reshape({sequences, shards.shards * runs, experts})
                            .index_select(1, shards.slot_order)
                            .reshape({-1, experts});
  const auto ahead = (in_order.cumsum(0) - in_order).view({sequences, shards.shards * runs, experts});
  const auto ahead_of_mine = ahead.index_select(1, shards.own_slot_places).reshape({-1, experts});
  return ahead_of_mine - (own.cumsum(0) - own);
}

}  // namespace

SequenceShards make_sequence_shards(const std::vector<std::vector<spec::PositionRun>>& runs, int self, Communicator* sp,
                                    Communicator* cp, const torch::Device& device) {
  SequenceShards s;
  s.sp = sp;
  s.cp = cp;
  s.shards = static_cast<int>(runs.size());
  s.self = self;
  const int gathered = (sp != nullptr ? sp->size() : 1) * (cp != nullptr ? cp->size() : 1);
  CPT_CHECK(gathered == s.shards && self >= 0 && self < s.shards, "shard ", self, " of ", s.shards, " over groups of ",
            gathered, " ranks");
  std::size_t most = 1;
  for (const auto& shard : runs) most = std::max(most, shard.size());
  s.runs_per_shard = static_cast<std::int64_t>(most);
  // Slot g·R + j holds shard g's run j; empty slots sort last.
  std::vector<std::int64_t> start(runs.size() * most, std::numeric_limits<std::int64_t>::max());
  for (std::size_t g = 0; g < runs.size(); ++g) {
    for (std::size_t j = 0; j < runs[g].size(); ++j) start[g * most + j] = runs[g][j].start;
  }
  std::vector<std::int64_t> order(start.size()), place(start.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return start[static_cast<std::size_t>(a)] < start[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = 0; i < order.size(); ++i)
    place[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  const auto& mine = runs[static_cast<std::size_t>(self)];
  std::vector<std::int64_t> own_places, run_of_position;
  for (std::size_t j = 0; j < most; ++j) own_places.push_back(place[static_cast<std::size_t>(self) * most + j]);
  for (std::size_t j = 0; j < mine.size(); ++j) {
    run_of_position.insert(run_of_position.end(), static_cast<std::size_t>(mine[j].length),
                           static_cast<std::int64_t>(j));
  }
  s.slot_order = index_tensor(order, device);
  s.own_slot_places = index_tensor(own_places, device);
  s.run_of_position = index_tensor(run_of_position, device);
  return s;
}

torch::Tensor limit_to_best_groups(const torch::Tensor& scores, int groups, int groups_per_token, std::int64_t k) {
  const std::int64_t tokens = scores.size(0), experts = scores.size(1), per_group = experts / groups;
  const auto grouped = scores.view({tokens, groups, per_group});
  const auto group_scores = std::get<0>(grouped.topk(k / groups_per_token, -1)).sum(-1);  // [T, G]
  const auto best = std::get<1>(group_scores.topk(groups_per_token, -1));                 // [T, g]
  const auto kept = torch::zeros({tokens, groups}, scores.options().dtype(torch::kBool)).scatter(1, best, true);
  return grouped.masked_fill(kept.logical_not().unsqueeze(-1), -std::numeric_limits<float>::infinity())
      .view({tokens, experts});
}

MicrobatchRouting route_microbatch(const torch::Tensor& top_experts, std::int64_t sequences,
                                   const torch::Tensor& probability_sums, const SequenceShards* shards,
                                   const torch::Tensor& real_tokens) {
  const bool per_sequence = probability_sums.dim() == 2;
  const bool padded = real_tokens.defined();
  const std::int64_t experts = probability_sums.size(-1);
  const std::int64_t tokens = top_experts.size(0);
  // Pairs per (row, expert) [rows, E] of the tokens whose row is `row_of_token` [T_local]: all
  // of them, or those of real tokens.
  const auto pairs_per_row = [&](const torch::Tensor& row_of_token, std::int64_t rows, bool real_only) {
    auto cells = row_of_token.unsqueeze(1) * experts + top_experts;  // [T_local, k]
    if (real_only) cells = cells.index({real_tokens});
    return torch::bincount(cells.reshape({-1}), {}, rows * experts).view({rows, experts});
  };
  MicrobatchRouting routing;
  if (shards == nullptr || shards->shards == 1) {
    routing.chosen = routing.local_chosen = torch::bincount(top_experts.reshape({-1}), {}, experts);
    routing.counted =
        padded ? torch::bincount(top_experts.index({real_tokens}).reshape({-1}), {}, experts) : routing.chosen;
    routing.tokens = tokens;
    if (per_sequence) {
      // Tokens are b-major: token t is sequence t / (T / B)'s.
      const auto sequence_of_token = torch::arange(tokens, top_experts.options()).div(tokens / sequences, "floor");
      routing.sequence_chosen = pairs_per_row(sequence_of_token, sequences, padded);
    }
    return routing;
  }
  const std::int64_t runs = shards->runs_per_shard, rows = sequences * runs;
  CPT_CHECK(tokens == sequences * shards->run_of_position.size(0), tokens, " tokens of ", sequences,
            " sequences on a shard of ", shards->run_of_position.size(0), " positions");
  // [B·R (+ B·R) + 1, E] fp64 (or [... + B, E] per sequence): pairs per (row, expert), exact
  // below 2^53, those of real tokens apart under padding; then probability sums.
  routing.row_of_token =
      (torch::arange(sequences, top_experts.options()) * runs).unsqueeze(1).add(shards->run_of_position).reshape({-1});
  const auto own = pairs_per_row(routing.row_of_token, rows, false);
  std::vector<torch::Tensor> mine{own.to(torch::kFloat64)};
  if (padded) mine.push_back(pairs_per_row(routing.row_of_token, rows, true).to(torch::kFloat64));
  const auto sums = probability_sums.detach().to(torch::kFloat64);
  mine.push_back(per_sequence ? sums : sums.unsqueeze(0));
  const auto every = gather_shards(torch::cat(mine), *shards);  // [G, rows of `mine`, E]
  const auto counts = every.narrow(1, 0, rows).round().to(torch::kInt64);
  const auto real_counts = padded ? every.narrow(1, rows, rows).round().to(torch::kInt64) : counts;
  const std::int64_t sums_row = padded ? 2 * rows : rows;
  routing.chosen = counts.sum(std::vector<std::int64_t>{0, 1});
  routing.counted = padded ? real_counts.sum(std::vector<std::int64_t>{0, 1}) : routing.chosen;
  routing.local_chosen = own.sum(0);
  if (per_sequence) {
    routing.sequence_chosen =
        real_counts.view({shards->shards, sequences, runs, experts}).sum(std::vector<std::int64_t>{0, 2});
    routing.sequence_probability_sums = every.narrow(1, sums_row, sequences).sum(0).to(torch::kFloat32);
    routing.probability_sums = routing.sequence_probability_sums.sum(0);
  } else {
    routing.probability_sums = every.select(1, sums_row).sum(0).to(torch::kFloat32);
  }
  routing.tokens = tokens * shards->shards;
  routing.offset_of_row = offsets_of(counts, own, *shards);
  return routing;
}

KeptPairs keep_pairs(const torch::Tensor& top_experts, const torch::Tensor& top_weights,
                     const MicrobatchRouting& routing, std::int64_t capacity) {
  const std::int64_t k = top_experts.size(1), experts = routing.chosen.size(0);
  const auto expert_of_pair = top_experts.reshape({-1});
  const auto order = std::get<1>(expert_of_pair.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  KeptPairs pairs{torch::div(order, k, "floor"), top_weights.reshape({-1}).index_select(0, order),
                  routing.local_chosen};
  if (capacity < 0) return pairs;
  const auto sorted_experts = expert_of_pair.index_select(0, order);
  const auto run_start = pairs.per_expert.cumsum(0) - pairs.per_expert;  // [E]: each expert's first sorted pair
  auto position = torch::arange(order.size(0), order.options()) - run_start.index_select(0, sorted_experts);
  if (routing.offset_of_row.defined()) {
    const auto row = routing.row_of_token.index_select(0, pairs.token);
    position = position + routing.offset_of_row.index({row, sorted_experts});
  }
  const auto kept = (position < capacity).nonzero().squeeze(1);
  pairs.token = pairs.token.index_select(0, kept);
  pairs.weight = pairs.weight.index_select(0, kept);
  pairs.per_expert = torch::bincount(sorted_experts.index_select(0, kept), {}, experts);
  return pairs;
}

}  // namespace cpt::exec
