// The MoE layer on sequence shards (model/moe_routing.h), with two ranks as two threads of this
// process over Gloo: the routing's worked example; on any split of the sequences into runs the
// same kept (token, expert) pairs as one pass over the whole microbatch; and the layer under
// sequence parallelism (tp 2) or context parallelism (cp 2), its experts whole on each rank or split
// over the same two ranks, against the whole layer on the whole sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "executor/model/moe_mlp.h"
#include "executor/model/moe_routing.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/model_catalog.h"
#include "spec/sequence_split.h"
#include "tests/executor/executor_test_support.h"

namespace cpt::exec {
namespace {

using Runs = std::vector<std::vector<spec::PositionRun>>;

// Two ranks as threads over Gloo (executor_test_support.h).
void on_two_ranks(const std::function<void(int, Communicator&)>& rank_main) {
  testing::on_two_gloo_ranks("sequence/0", rank_main);
}

// moe_routing.h's worked example with two experts, k 1 (expert 0 is the example's): the whole
// microbatch's counts on both ranks, and rank 0's places in the microbatch's order.
TEST(SequenceShardedRouting, OffsetsAndDropsOfTheWorkedExample) {
  std::vector<MicrobatchRouting> routings(2);
  std::vector<KeptPairs> kept(2);
  on_two_ranks([&](int rank, Communicator& group) {
    // [B 2, S_local 4, k 1]: rank 0 routes [2, 1] tokens of its sequences to expert 0, rank 1 [3, 0].
    const auto top = rank == 0 ? torch::tensor({0, 0, 1, 1, 0, 1, 1, 1}, torch::kInt64)
                               : torch::tensor({0, 0, 0, 1, 1, 1, 1, 1}, torch::kInt64);
    const auto probability_sums = torch::full({2}, 4.0);  // 8 tokens, each 0.5 to both experts
    const auto shards = make_sequence_shards(spec::sequence_shard_runs(8, 1, 2), rank, &group, nullptr, torch::kCPU);
    const auto r = static_cast<std::size_t>(rank);
    routings[r] = route_microbatch(top.reshape({8, 1}), /*sequences=*/2, probability_sums, &shards);
    kept[r] = keep_pairs(top.reshape({8, 1}), torch::ones({8, 1}), routings[r], /*capacity=*/5);
  });
  for (const auto& routing : routings) {
    EXPECT_TRUE(torch::equal(routing.chosen, torch::tensor({6, 10}, torch::kInt64))) << routing.chosen;
    EXPECT_EQ(routing.tokens, 16);
    EXPECT_TRUE(torch::allclose(routing.probability_sums, torch::full({2}, 8.0)));
  }
  EXPECT_TRUE(torch::equal(routings[0].local_chosen, torch::tensor({3, 5}, torch::kInt64))) << routings[0].local_chosen;
  EXPECT_TRUE(torch::equal(routings[0].offset_of_row, torch::tensor({{0, 0}, {3, 1}}, torch::kInt64)))
      << routings[0].offset_of_row;
  // Expert 0: tokens 0, 1 at places 0, 1; token 4 at 2 + 3 = 5, past the capacity. Expert 1:
  // tokens 2, 3 at 0, 1; tokens 5, 6, 7 at 2-4 + 1 (rank 1's pair of sequence 0): token 7 dropped.
  EXPECT_TRUE(torch::equal(kept[0].token, torch::tensor({0, 1, 2, 3, 5, 6}, torch::kInt64))) << kept[0].token;
  EXPECT_TRUE(torch::equal(kept[0].per_expert, torch::tensor({2, 4}, torch::kInt64))) << kept[0].per_expert;
}

// The (sequence position, expert) pairs `kept` keeps of tokens at `positions` of each sequence.
std::set<std::pair<std::int64_t, std::int64_t>> kept_cells(const KeptPairs& kept,
                                                           const std::vector<std::int64_t>& positions,
                                                           std::int64_t seq_len) {
  const auto local = static_cast<std::int64_t>(positions.size());
  const auto experts = torch::repeat_interleave(kept.per_expert);
  std::set<std::pair<std::int64_t, std::int64_t>> cells;
  for (std::int64_t i = 0; i < kept.token.size(0); ++i) {
    const std::int64_t token = kept.token[i].item<std::int64_t>();
    const std::int64_t place = token / local * seq_len + positions[static_cast<std::size_t>(token % local)];
    cells.emplace(place, experts[i].item<std::int64_t>());
  }
  return cells;
}

// Every rank's kept pairs, together, are the pairs one pass over the whole microbatch keeps, with
// the whole microbatch's counts on each rank: B 3 sequences of 12 tokens, 4 experts, top 2, a
// capacity of 5 of the 18 pairs each expert averages, the tokens split into the runs `runs`
// gathered over one group as sequence parallelism's (`as_sp`) or context parallelism's.
void expect_the_whole_microbatchs_pairs(const Runs& runs, bool as_sp) {
  constexpr std::int64_t kSequences = 3, kSeqLen = 12, kExperts = 4, kCapacity = 5;
  torch::manual_seed(3);
  const auto top = torch::rand({kSequences * kSeqLen, kExperts}).topk(2, -1);
  const auto whole_experts = std::get<1>(top), whole_weights = std::get<0>(top);
  const auto probability_sums = torch::rand({kExperts});
  const auto whole = route_microbatch(whole_experts, kSequences, probability_sums, nullptr);
  std::vector<std::int64_t> every_position(kSeqLen);
  for (std::int64_t p = 0; p < kSeqLen; ++p) every_position[static_cast<std::size_t>(p)] = p;
  const auto want = kept_cells(keep_pairs(whole_experts, whole_weights, whole, kCapacity), every_position, kSeqLen);

  std::vector<std::set<std::pair<std::int64_t, std::int64_t>>> got(2);
  std::vector<MicrobatchRouting> routings(2);
  on_two_ranks([&](int rank, Communicator& group) {
    std::vector<std::int64_t> positions;
    for (const auto& run : runs[static_cast<std::size_t>(rank)]) {
      for (std::int64_t i = 0; i < run.length; ++i) positions.push_back(run.start + i);
    }
    const auto index = torch::tensor(positions, torch::kInt64);
    auto pick = [&](const torch::Tensor& t) {
      return t.view({kSequences, kSeqLen, -1}).index_select(1, index).reshape({-1, t.size(1)});
    };
    const auto shards =
        make_sequence_shards(runs, rank, as_sp ? &group : nullptr, as_sp ? nullptr : &group, torch::kCPU);
    const auto r = static_cast<std::size_t>(rank);
    routings[r] = route_microbatch(pick(whole_experts), kSequences, probability_sums, &shards);
    got[r] =
        kept_cells(keep_pairs(pick(whole_experts), pick(whole_weights), routings[r], kCapacity), positions, kSeqLen);
  });
  std::set<std::pair<std::int64_t, std::int64_t>> together = got[0];
  together.insert(got[1].begin(), got[1].end());
  EXPECT_EQ(together.size(), got[0].size() + got[1].size());
  EXPECT_EQ(together, want);
  EXPECT_LT(want.size(), static_cast<std::size_t>(kSequences * kSeqLen * 2)) << "the capacity must drop some pairs";
  for (const auto& routing : routings) {
    EXPECT_TRUE(torch::equal(routing.chosen, whole.chosen)) << routing.chosen;
    EXPECT_EQ(routing.tokens, kSequences * kSeqLen);
  }
}

TEST(SequenceShardedRouting, TheContextParallelSplitKeepsTheWholeMicrobatchsPairs) {
  expect_the_whole_microbatchs_pairs(spec::sequence_shard_runs(12, 2, 1), false);
}

TEST(SequenceShardedRouting, TheSequenceParallelSplitKeepsTheWholeMicrobatchsPairs) {
  expect_the_whole_microbatchs_pairs(spec::sequence_shard_runs(12, 1, 2), true);
}

// Two runs of different lengths on each rank, interleaved: rank 0 holds 0-1 and 5-8.
TEST(SequenceShardedRouting, AnySplitIntoRunsKeepsTheWholeMicrobatchsPairs) {
  expect_the_whole_microbatchs_pairs(Runs{{{0, 2}, {5, 4}}, {{2, 3}, {9, 3}}}, true);
}

// Rank 0 holds one run and rank 1 two (R 2: rank 0's second slot is empty, as a middle shard's
// neighbours' are under an odd sp with cp).
TEST(SequenceShardedRouting, ARankWithFewerRunsKeepsTheWholeMicrobatchsPairs) {
  expect_the_whole_microbatchs_pairs(Runs{{{3, 6}}, {{0, 3}, {9, 3}}}, false);
}

enum class Shards { kSequenceParallel, kContextParallel };

// The layer on two sequence shards against the whole layer on the whole sequences (2 × 20 tokens):
// each rank's output is the whole one's at its positions; the routing statistics are the whole
// microbatch's on both ranks. Gradients: under sequence parallelism the router's is summed over
// the group by the layer and the shared experts' split over it; under context parallelism both are
// each rank's own tokens' (data parallelism sums them over dp × cp). The routed experts' are summed
// over both ranks when each holds every expert, whole on their rank when split over the two. With
// an auxiliary loss, and two sequences so that the capacity's token order interleaves the ranks.
// `per_sequence`: the auxiliary loss per sequence (DeepSeek-V3's), whose per-sequence counts and
// probability sums span both shards. `padded`: the second sequence's last 7 positions are padding,
// on both ranks under context parallelism, on the second under sequence parallelism.
void expect_sharded_layer_matches_the_whole(spec::ModelSpec m, Shards mode, bool experts_split,
                                            bool per_sequence = false, bool padded = false) {
  constexpr double kAuxScale = 0.3;
  constexpr std::int64_t kSeqLen = 20;
  const bool sp = mode == Shards::kSequenceParallel;
  MoeMlp whole(m);
  torch::manual_seed(13);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : whole->parameters()) p.normal_(0.0, 0.2);
  }
  const auto tokens = torch::randn({2, kSeqLen, m.hidden}), weights = torch::randn({2, kSeqLen, m.hidden});
  whole->train();
  whole->set_aux_loss_scale(kAuxScale);
  whole->set_aux_loss_per_sequence(per_sequence);
  const auto real =
      padded ? torch::arange(kSeqLen).lt(torch::tensor({kSeqLen, kSeqLen - 7}).unsqueeze(1)) : torch::Tensor();
  const auto whole_out = whole->forward(tokens, real);
  whole_out.mul(weights).sum().backward();
  const auto whole_grads = testing::gradients_by_name(*whole);
  const RoutingStats whole_stats = whole->take_routing_stats();
  if (m.moe.capacity_factor > 0) {
    EXPECT_GT(whole_stats.dropped, 0);
  }

  std::vector<torch::Tensor> outputs(2), positions(2);
  std::vector<std::map<std::string, torch::Tensor>> grads(2), expected(2);
  std::vector<RoutingStats> stats(2);
  on_two_ranks([&](int rank, Communicator& group) {
    const TensorParallel tp = sp ? TensorParallel{&group, /*sequence_parallel=*/true} : TensorParallel{};
    const ContextParallel cp = sp ? ContextParallel{} : ContextParallel{&group};
    MoeMlp part(m, experts_split ? ExpertParallel{&group} : ExpertParallel{}, tp, cp);
    const auto r = static_cast<std::size_t>(rank);
    positions[r] = sp ? torch::arange(rank * kSeqLen / 2, (rank + 1) * kSeqLen / 2, torch::kInt64)
                      : torch::tensor(spec::sequence_positions_of_rank(kSeqLen, 2, rank), torch::kInt64);
    {
      torch::NoGradGuard no_grad;
      const auto source = whole->named_parameters();
      for (auto& p : part->named_parameters()) {
        const auto name = "layers.0.mlp." + p.key();  // the model's name, for its tp split
        p.value().copy_(tp_shard_of_full(name, source[p.key()], m.vocab, tp));
        expected[r][p.key()] = tp_shard_of_full(name, whole_grads.at(p.key()), m.vocab, tp);
      }
    }
    part->train();
    part->set_aux_loss_scale(kAuxScale);
    part->set_aux_loss_per_sequence(per_sequence);
    const auto out = part->forward(tokens.index_select(1, positions[r]),
                                   padded ? real.index_select(1, positions[r]) : torch::Tensor());
    outputs[r] = out.detach();
    out.mul(weights.index_select(1, positions[r])).sum().backward();
    grads[r] = testing::gradients_by_name(*part);
    stats[r] = part->take_routing_stats();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    // The shared experts' partial sums reduced over the two ranks, GEMMs of other shapes: fp32
    // reordering.
    EXPECT_LE(testing::relative_max_difference(outputs[r], whole_out.detach().index_select(1, positions[r])),
              testing::moe_layer_reordering_bound(m, 2))
        << "rank " << r;
    EXPECT_TRUE(torch::equal(stats[r].tokens_per_expert, whole_stats.tokens_per_expert)) << "rank " << r;
    EXPECT_EQ(stats[r].dropped, whole_stats.dropped) << "rank " << r;
    EXPECT_EQ(stats[r].routed, whole_stats.routed) << "rank " << r;
    EXPECT_NEAR(stats[r].aux_loss_sum, whole_stats.aux_loss_sum, 1e-6 * whole_stats.aux_loss_sum) << "rank " << r;
    for (const auto& [name, want] : expected[r]) {
      torch::Tensor got = grads[r].at(name);
      const bool routed = name.starts_with("experts.");
      if (routed && experts_split) {
        EXPECT_FALSE(grads[1 - r].contains(name)) << name << " must live on exactly one rank";
      } else if (routed || !sp) {
        got = grads[0].at(name) + grads[1].at(name);
      }
      // Sums over the 40 tokens' 80 pairs in another order: fp32 round-off of 80 terms.
      const double largest = want.abs().max().item<double>();
      EXPECT_LE((got - want).abs().max().item<double>(), 80 * std::ldexp(1.0, -24) * largest + 1e-9)
          << name << " on rank " << r;
    }
  }
}

spec::ModelSpec tiny_moe(double capacity_factor = 0) {
  auto m = spec::find_catalog_model("tiny-moe").value().spec;
  m.moe.capacity_factor = capacity_factor;
  return m;
}

TEST(SequenceShardedExperts, LayerWithEveryExpertOnEachRankMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kSequenceParallel, false);
}

TEST(SequenceShardedExperts, LayerWithExpertsSplitOverTheSameRanksMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kSequenceParallel, true);
}

TEST(SequenceShardedExperts, CapacityIsCountedInTheMicrobatchsTokenOrder) {
  expect_sharded_layer_matches_the_whole(tiny_moe(0.75), Shards::kSequenceParallel, true);
}

TEST(ContextParallelExperts, LayerWithEveryExpertOnEachRankMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kContextParallel, false);
}

TEST(ContextParallelExperts, LayerWithExpertsSplitOverTheSameRanksMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kContextParallel, true);
}

// Rank 0 holds each sequence's first and last quarter: its pairs of the last quarter come after
// rank 1's of the middle half.
TEST(ContextParallelExperts, CapacityIsCountedInTheMicrobatchsTokenOrder) {
  expect_sharded_layer_matches_the_whole(tiny_moe(0.75), Shards::kContextParallel, true);
}

TEST(SequenceShardedExperts, SequenceAuxiliaryLossMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kSequenceParallel, true, /*per_sequence=*/true);
}

TEST(ContextParallelExperts, SequenceAuxiliaryLossMatchesTheWholeLayer) {
  expect_sharded_layer_matches_the_whole(tiny_moe(), Shards::kContextParallel, false, /*per_sequence=*/true);
}

// Padding's pairs take capacity but leave the load, the auxiliary loss (per sequence, whose second
// sequence's real tokens span both shards) and its gradient as the whole layer has them.
TEST(SequenceShardedExperts, PaddingIsLeftOutOfTheWholeMicrobatchsStatistics) {
  expect_sharded_layer_matches_the_whole(tiny_moe(0.75), Shards::kSequenceParallel, true, /*per_sequence=*/true,
                                         /*padded=*/true);
}

TEST(ContextParallelExperts, PaddingIsLeftOutOfTheWholeMicrobatchsStatistics) {
  expect_sharded_layer_matches_the_whole(tiny_moe(0.75), Shards::kContextParallel, false, /*per_sequence=*/false,
                                         /*padded=*/true);
}

}  // namespace
}  // namespace cpt::exec
