// Expert parallelism (executor/parallel/expert_parallel.h) with two ranks as two threads of this
// process over Gloo: the dispatch plan of the header's worked example, and the MoE layer with its
// experts split over the two ranks against the layer holding every expert — the same outputs for
// each rank's tokens and the same gradients (each expert's summed over both ranks' tokens); and
// the layer on sequence-parallel shards of a tensor-parallel group (model/moe_routing.h's worked
// example; the experts whole on each rank or split over the same two ranks).
#include "executor/parallel/expert_parallel.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/executor/executor_test_support.h"
#include "executor/model/moe_mlp.h"
#include "executor/model/moe_routing.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

// Two ranks as threads over Gloo (executor_test_support.h), a port per test.
void on_two_ranks(int port_offset, const std::function<void(int, Communicator&)>& rank_main) {
  testing::on_two_gloo_ranks(31000 + static_cast<int>(::getpid() % 1000) * 8 + port_offset, "ep/0", rank_main);
}

TEST(ExpertParallel, DispatchPlanOfTheWorkedExample) {
  std::vector<ExpertDispatch> plans(2);
  on_two_ranks(0, [&](int rank, Communicator& group) {
    const auto per_expert =
        rank == 0 ? torch::tensor({3, 1, 0, 2}, torch::kInt64) : torch::tensor({1, 2, 2, 1}, torch::kInt64);
    plans[static_cast<std::size_t>(rank)] = plan_expert_dispatch(per_expert, ExpertParallel{&group});
  });
  const auto& zero = plans[0];
  EXPECT_EQ(zero.send_rows, (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(zero.recv_rows, (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(zero.rows_per_local_expert, (std::vector<std::int64_t>{4, 3}));
  EXPECT_TRUE(torch::equal(zero.by_expert, torch::tensor({0, 1, 2, 4, 3, 5, 6}, torch::kInt64))) << zero.by_expert;
  // Rank 1 (experts 2-3): receives [e3 e3] from rank 0 and [e2 e2 e3] from rank 1.
  const auto& one = plans[1];
  EXPECT_EQ(one.send_rows, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(one.recv_rows, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(one.rows_per_local_expert, (std::vector<std::int64_t>{2, 3}));
  EXPECT_TRUE(torch::equal(one.by_expert, torch::tensor({2, 3, 0, 1, 4}, torch::kInt64))) << one.by_expert;
}

// The gradients of `module`'s parameters by name.
std::map<std::string, torch::Tensor> grads_of(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : module.named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

// The layer with its experts over two ranks computes, for each rank's tokens, what the whole layer
// computes for them; its gradients are the whole layer's: the router's and shared experts' summed
// over the ranks (as data parallelism sums them), each routed expert's on its rank already whole.
// `starve_second_rank`: every token prefers experts 0 and 1, so rank 1 receives no rows at all.
void expect_expert_parallel_layer_matches_the_whole(spec::ModelSpec m, int port_offset,
                                                    bool starve_second_rank = false) {
  MoeMlp whole(m);
  torch::manual_seed(11);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : whole->parameters()) p.normal_(0.0, 0.2);
    if (starve_second_rank) {
      whole->gate->weight.fill_(-1.0);
      whole->gate->weight[0].fill_(1.0);
      whole->gate->weight[1].fill_(0.5);
    }
  }
  auto input = [&] {
    return starve_second_rank ? torch::rand({2, 9, m.hidden}) + 0.1 : torch::randn({2, 9, m.hidden});
  };
  const std::vector<torch::Tensor> tokens = {input(), input()};
  const std::vector<torch::Tensor> weights = {torch::randn({2, 9, m.hidden}), torch::randn({2, 9, m.hidden})};
  whole->train();
  std::vector<torch::Tensor> whole_out;
  for (int r = 0; r < 2; ++r) {
    const auto out = whole->forward(tokens[static_cast<std::size_t>(r)]);
    whole_out.push_back(out.detach());
    out.mul(weights[static_cast<std::size_t>(r)]).sum().backward();
  }
  const auto whole_grads = grads_of(*whole);

  std::vector<torch::Tensor> outputs(2);
  std::vector<std::map<std::string, torch::Tensor>> grads(2);
  std::vector<std::int64_t> first_expert(2);
  on_two_ranks(port_offset, [&](int rank, Communicator& group) {
    MoeMlp part(m, ExpertParallel{&group});
    {
      torch::NoGradGuard no_grad;
      const auto source = whole->named_parameters();
      for (auto& p : part->named_parameters()) p.value().copy_(source[p.key()]);
    }
    part->train();
    const auto r = static_cast<std::size_t>(rank);
    const auto out = part->forward(tokens[r]);
    outputs[r] = out.detach();
    out.mul(weights[r]).sum().backward();
    grads[r] = grads_of(*part);
    first_expert[r] = part->first_expert();
  });
  EXPECT_EQ(first_expert, (std::vector<std::int64_t>{0, m.moe.experts / 2}));
  // The same products summed in the same order per row: equal to fp32 round-off of a few ulps.
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::allclose(outputs[r], whole_out[r], 1e-6, 1e-6)) << "rank " << r;
  }
  for (const auto& [name, expected] : whole_grads) {
    const bool routed = name.starts_with("experts.");
    torch::Tensor got;
    if (routed) {
      got = grads[0].contains(name) ? grads[0].at(name) : grads[1].at(name);
      EXPECT_NE(grads[0].contains(name), grads[1].contains(name)) << name << " must live on exactly one rank";
    } else {
      got = grads[0].at(name) + grads[1].at(name);
    }
    // Sums over both ranks' 36 rows in another order (two backward passes vs one): fp32 round-off
    // of 36 terms, each element within 36 · 2^-24 of the gradient's largest magnitude.
    const double largest = expected.abs().max().item<double>();
    EXPECT_LE((got - expected).abs().max().item<double>(), 36 * std::ldexp(1.0, -24) * largest + 1e-9) << name;
  }
}

TEST(ExpertParallel, LayerOverTwoRanksMatchesTheWholeLayerDropless) {
  expect_expert_parallel_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec, 1);
}

TEST(ExpertParallel, ARankThatReceivesNoTokensStillJoinsBothExchanges) {
  expect_expert_parallel_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec, 3, true);
}

TEST(ExpertParallel, LayerOverTwoRanksMatchesTheWholeLayerWithACapacity) {
  auto m = spec::find_catalog_model("tiny-moe").value().spec;
  m.moe.capacity_factor = 0.75;  // each rank drops over its own tokens, as data parallelism does
  m.moe.shared_ffn_hidden = 0;
  expect_expert_parallel_layer_matches_the_whole(m, 2);
}

// moe_routing.h's worked example with two experts, k 1 (expert 0 is the example's): the whole
// microbatch's counts on both ranks, and rank 0's places in the microbatch's order.
TEST(SequenceShardedRouting, OffsetsAndDropsOfTheWorkedExample) {
  std::vector<MicrobatchRouting> routings(2);
  std::vector<KeptPairs> kept(2);
  on_two_ranks(4, [&](int rank, Communicator& group) {
    // [B 2, S_local 4, k 1]: rank 0 routes [2, 1] tokens of its sequences to expert 0, rank 1 [3, 0].
    const auto top = rank == 0 ? torch::tensor({0, 0, 1, 1, 0, 1, 1, 1}, torch::kInt64)
                               : torch::tensor({0, 0, 0, 1, 1, 1, 1, 1}, torch::kInt64);
    const auto probability_sums = torch::full({2}, 4.0);  // 8 tokens, each 0.5 to both experts
    const auto r = static_cast<std::size_t>(rank);
    routings[r] = route_microbatch(top.reshape({8, 1}), /*sequences=*/2, probability_sums, &group);
    kept[r] = keep_pairs(top.reshape({8, 1}), torch::ones({8, 1}), routings[r], /*capacity=*/5, 4);
  });
  for (const auto& routing : routings) {
    EXPECT_TRUE(torch::equal(routing.chosen, torch::tensor({6, 10}, torch::kInt64))) << routing.chosen;
    EXPECT_EQ(routing.tokens, 16);
    EXPECT_TRUE(torch::allclose(routing.probability_sums, torch::full({2}, 8.0)));
  }
  EXPECT_TRUE(torch::equal(routings[0].local_chosen, torch::tensor({3, 5}, torch::kInt64))) << routings[0].local_chosen;
  EXPECT_TRUE(torch::equal(routings[0].offset_of_sequence, torch::tensor({{0, 0}, {3, 1}}, torch::kInt64)))
      << routings[0].offset_of_sequence;
  // Expert 0: tokens 0, 1 at places 0, 1; token 4 at 2 + 3 = 5, past the capacity. Expert 1:
  // tokens 2, 3 at 0, 1; tokens 5, 6, 7 at 2-4 + 1 (rank 1's pair of sequence 0): token 7 dropped.
  EXPECT_TRUE(torch::equal(kept[0].token, torch::tensor({0, 1, 2, 3, 5, 6}, torch::kInt64))) << kept[0].token;
  EXPECT_TRUE(torch::equal(kept[0].per_expert, torch::tensor({2, 4}, torch::kInt64))) << kept[0].per_expert;
}

// The layer on two sequence shards (tp 2, sequence parallel) against the whole layer on the whole
// sequences: each rank's output is the whole one's positions, the router's gradient (summed over
// the group) and the shared experts' (split over it) are the whole layer's, the routed experts'
// too (summed over both ranks when each holds every expert); the routing statistics are the whole
// microbatch's on both ranks. With an auxiliary loss, and two sequences so that the capacity's
// token order interleaves the ranks.
void expect_sequence_sharded_layer_matches_the_whole(spec::ModelSpec m, bool experts_split, int port_offset) {
  constexpr double kAuxScale = 0.3;
  MoeMlp whole(m);
  torch::manual_seed(13);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : whole->parameters()) p.normal_(0.0, 0.2);
  }
  const auto tokens = torch::randn({2, 18, m.hidden}), weights = torch::randn({2, 18, m.hidden});
  whole->train();
  whole->set_aux_loss_scale(kAuxScale);
  const auto whole_out = whole->forward(tokens);
  whole_out.mul(weights).sum().backward();
  const auto whole_grads = grads_of(*whole);
  const RoutingStats whole_stats = whole->take_routing_stats();
  if (m.moe.capacity_factor > 0) {
    EXPECT_GT(whole_stats.dropped, 0);
  }

  std::vector<torch::Tensor> outputs(2);
  std::vector<std::map<std::string, torch::Tensor>> grads(2), expected(2);
  std::vector<RoutingStats> stats(2);
  on_two_ranks(port_offset, [&](int rank, Communicator& group) {
    const TensorParallel tp{&group, /*sequence_parallel=*/true};
    MoeMlp part(m, experts_split ? ExpertParallel{&group} : ExpertParallel{}, tp);
    const auto r = static_cast<std::size_t>(rank);
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
    const auto out = part->forward(tokens.narrow(1, rank * 9, 9));
    outputs[r] = out.detach();
    out.mul(weights.narrow(1, rank * 9, 9)).sum().backward();
    grads[r] = grads_of(*part);
    stats[r] = part->take_routing_stats();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    // The shared experts' partial sums reduced over the ranks: fp32 round-off.
    EXPECT_TRUE(
        torch::allclose(outputs[r], whole_out.detach().narrow(1, static_cast<std::int64_t>(r) * 9, 9), 1e-5, 1e-6))
        << "rank " << r;
    EXPECT_TRUE(torch::equal(stats[r].tokens_per_expert, whole_stats.tokens_per_expert)) << "rank " << r;
    EXPECT_EQ(stats[r].dropped, whole_stats.dropped) << "rank " << r;
    EXPECT_NEAR(stats[r].aux_loss_sum, whole_stats.aux_loss_sum, 1e-6 * whole_stats.aux_loss_sum) << "rank " << r;
    for (const auto& [name, want] : expected[r]) {
      torch::Tensor got = grads[r].at(name);
      if (name.starts_with("experts.")) {
        if (!experts_split) got = grads[0].at(name) + grads[1].at(name);
        EXPECT_TRUE(!experts_split || !grads[1 - r].contains(name)) << name << " must live on exactly one rank";
      }
      // Sums over the 36 tokens' 72 pairs in another order: fp32 round-off of 72 terms.
      const double largest = want.abs().max().item<double>();
      EXPECT_LE((got - want).abs().max().item<double>(), 72 * std::ldexp(1.0, -24) * largest + 1e-9)
          << name << " on rank " << r;
    }
  }
}

TEST(SequenceShardedExperts, LayerWithEveryExpertOnEachRankMatchesTheWholeLayer) {
  expect_sequence_sharded_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec, false, 5);
}

TEST(SequenceShardedExperts, LayerWithExpertsSplitOverTheSameRanksMatchesTheWholeLayer) {
  expect_sequence_sharded_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec, true, 6);
}

TEST(SequenceShardedExperts, CapacityIsCountedInTheMicrobatchsTokenOrder) {
  auto m = spec::find_catalog_model("tiny-moe").value().spec;
  m.moe.capacity_factor = 0.75;
  expect_sequence_sharded_layer_matches_the_whole(m, true, 7);
}

}  // namespace
}  // namespace cpt::exec
