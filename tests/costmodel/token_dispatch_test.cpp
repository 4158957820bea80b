// The flex token dispatcher's copies per token (costmodel/token_dispatch.h) by hand, and its price
// against the all-to-all's on the same layout.
#include "costmodel/token_dispatch.h"

#include <gtest/gtest.h>

#include <variant>
#include <vector>

#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/token_dispatcher.h"

namespace cpt::cost {
namespace {

GroupPlacement ep_group(int nodes, int ranks_per_node) {
  GroupPlacement g;
  g.size = nodes * ranks_per_node;
  g.nodes = nodes;
  g.ranks_per_node = ranks_per_node;
  g.intra = {core::BytesPerSecond(400e9), core::Seconds(3e-6)};
  g.inter = {core::BytesPerSecond(50e9), core::Seconds(6e-6)};
  return g;
}

spec::ExpertSpec experts(int count, int top_k) {
  spec::ExpertSpec e;
  e.experts = count;
  e.experts_per_token = top_k;
  e.expert_ffn_hidden = 768;
  return e;
}

// The header's worked example, Qwen3-30B-A3B's 128 experts, top-8, on 2 nodes x 8: a node of 64
// experts misses all 8 with C(64,8)/C(128,8) = 97,527/31,502,350 (the exact fraction reduced), a
// rank of 8 with C(120,8)/C(128,8).
TEST(FlexDispatch, CopiesOfTheWorkedExample) {
  const FlexCopies copies = flex_copies(experts(128, 8), ep_group(2, 8));
  EXPECT_NEAR(copies.over_network, 31404823.0 / 31502350.0, 1e-12);
  EXPECT_NEAR(copies.over_nvlink, 275072345989.0 / 47656755080.0, 1e-12);
  // The all-to-all sends k·(N−1)/N = 4 copies over the network.
  EXPECT_LT(copies.over_network, 8.0 * 1 / 2);
}

// One node: nothing crosses the network, and a token reaches each other rank holding one of its
// experts once; with top-1 routing that is the all-to-all's k·(r−1)/r.
TEST(FlexDispatch, OneNodeAndTopOneRouting) {
  const FlexCopies eight = flex_copies(experts(128, 8), ep_group(1, 8));
  EXPECT_EQ(eight.over_network, 0.0);
  double miss = 1;  // C(112, 8) / C(128, 8): a rank's 16 experts hold none of the 8
  for (int i = 0; i < 8; ++i) miss *= (112.0 - i) / (128.0 - i);
  EXPECT_NEAR(eight.over_nvlink, 7 * (1 - miss), 1e-12);
  const FlexCopies top_one = flex_copies(experts(64, 1), ep_group(1, 8));
  EXPECT_NEAR(top_one.over_nvlink, 7.0 / 8.0, 1e-12);
  // A token picks 5 of 8 experts: the other rank's 4 cannot all miss.
  EXPECT_NEAR(flex_copies(experts(8, 5), ep_group(1, 2)).over_nvlink, 1.0, 1e-12);
}

spec::ExpertSpec grouped(int count, int top_k, int groups, int groups_per_token) {
  spec::ExpertSpec e = experts(count, top_k);
  e.expert_groups = groups;
  e.groups_per_token = groups_per_token;
  return e;
}

// DeepSeek-V3's routing (256 experts, top-8 from the best 4 of 8 groups, 2 from each): on 8 nodes
// a node holds one group and is needed when its group is chosen, C(7,3)/C(8,4) = 1/2; a rank's 4
// experts of a group miss its 2 draws with C(28,2)/C(32,2). On 2 nodes a node's 4 groups all miss
// only when the 4 others are chosen, 1/C(8,4).
TEST(FlexDispatch, GroupLimitedRoutingReachesFewerNodes) {
  const spec::ExpertSpec v3 = grouped(256, 8, 8, 4);
  const FlexCopies eight = flex_copies(v3, ep_group(8, 8));
  EXPECT_NEAR(eight.over_network, 7 * 0.5, 1e-12);
  EXPECT_NEAR(eight.over_nvlink, 8 * 7 * (1 - (0.5 + 0.5 * 378.0 / 496.0)), 1e-12);
  const FlexCopies two = flex_copies(v3, ep_group(2, 8));
  EXPECT_NEAR(two.over_network, 69.0 / 70.0, 1e-12);
  EXPECT_NEAR(two.over_nvlink, 2 * 7 * (1 - (0.5 + 0.5 * 120.0 / 496.0)), 1e-12);
  // Ungrouped, the same 8 experts reach more of the 8 nodes: 7 · (1 − C(224,8)/C(256,8)).
  EXPECT_GT(flex_copies(experts(256, 8), ep_group(8, 8)).over_network, 4.6);
  // One group and one chosen, or every group chosen, is ungrouped routing.
  for (const int groups : {1, 8}) {
    EXPECT_EQ(flex_copies(grouped(128, 8, groups, groups), ep_group(2, 8)).over_network,
              flex_copies(experts(128, 8), ep_group(2, 8)).over_network);
  }
  // Thousands of groups: finite (no binomial of them is formed), and fast.
  const FlexCopies many = flex_copies(grouped(2048, 1024, 1024, 512), ep_group(16, 8));
  EXPECT_GT(many.over_network, 0);
  EXPECT_LE(many.over_network, 15);
  EXPECT_GT(many.over_nvlink, 0);
  EXPECT_LE(many.over_nvlink, 16 * 7);
}

// Blocks that straddle groups, and top-k not a multiple of the chosen groups, against every token
// the model allows, enumerated: 12 experts in 4 groups of 3, top-3 from the best 2 groups (one
// gives 2, the other 1), on 3 nodes x 2 ranks of 2 experts (a node's 4 experts span two groups).
// The header's copies, counted from each source rank as it defines them.
TEST(FlexDispatch, GroupLimitedRoutingAgainstEveryToken) {
  const spec::ExpertSpec e = grouped(12, 3, 4, 2);
  const GroupPlacement g = ep_group(3, 2);
  std::vector<unsigned> tokens;  // each token's experts as bits, all equally likely
  for (int first = 0; first < 4; ++first) {
    for (int second = first + 1; second < 4; ++second) {
      for (const int two : {first, second}) {
        const int one = two == first ? second : first;
        for (const unsigned pair : {0b011u, 0b101u, 0b110u}) {
          for (int single = 0; single < 3; ++single) tokens.push_back(pair << (3 * two) | 1u << (3 * one + single));
        }
      }
    }
  }
  double network = 0;
  double nvlink = 0;
  for (const unsigned token : tokens) {
    for (int source = 0; source < 6; ++source) {
      const auto needed = [&](int rank) { return (token >> (2 * rank) & 0b11u) != 0; };
      for (int node = 0; node < 3; ++node) {
        const bool own = node == source / 2;
        const bool reached = own || needed(2 * node) || needed(2 * node + 1);
        if (!own && reached) network += 1;
        const int landing = 2 * node + source % 2;  // the rank a node's copy lands on (the source in its own)
        for (int rank = 2 * node; rank < 2 * node + 2; ++rank) nvlink += reached && rank != landing && needed(rank);
      }
    }
  }
  const double cases = 6.0 * static_cast<double>(tokens.size());
  const FlexCopies copies = flex_copies(e, g);
  EXPECT_NEAR(copies.over_network, network / cases, 1e-12);
  EXPECT_NEAR(copies.over_nvlink, nvlink / cases, 1e-12);
}

// The time is the busier of the two links, each α–β.
TEST(FlexDispatch, TimeIsTheBusierLink) {
  const GroupPlacement g = ep_group(2, 8);
  const FlexCopies copies = flex_copies(experts(128, 8), g);
  const core::Bytes tokens(4096LL * 2048 * 2);
  const double inside = 4096.0 * 2048 * 2 * copies.over_nvlink / 400e9 + 7 * 3e-6;
  const double across = 4096.0 * 2048 * 2 * copies.over_network / 50e9 + 1 * 6e-6;
  EXPECT_NEAR(flex_dispatch_time(tokens, experts(128, 8), g, 1.0).value(), std::max(inside, across), 1e-15);
  EXPECT_EQ(flex_dispatch_time(tokens, experts(128, 8), ep_group(1, 1), 1.0).value(), 0.0);
}

Estimate estimate(const spec::ParallelConfig& p, spec::TokenDispatcher dispatcher) {
  const auto model = spec::find_catalog_model("qwen3-30b-a3b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 16, "--gpu");
  CostModelOptions o;
  o.moe_dispatcher = dispatcher;
  const Evaluation e = evaluate(model, cluster, p, 4096, o);
  if (const auto* infeasible = std::get_if<Infeasible>(&e)) ADD_FAILURE() << infeasible->detail;
  return std::get<Estimate>(e);
}

// Qwen3-30B-A3B, ep 16 over two H100 nodes: the flex dispatcher's token crosses the network once,
// not four times, so its expert communication is cheaper; with expert-tp 2 it is priced as the
// all-to-all (DeepEP runs with expert-tp 1).
TEST(FlexDispatch, CheaperAcrossNodesAndOnlyWithExpertTpOne) {
  spec::ParallelConfig p;
  p.dp = 16;
  p.ep = 16;
  p.zero_stage = 1;
  p.micro_batch = 1;
  p.global_batch = 64;
  const Estimate pairs = estimate(p, spec::TokenDispatcher::kAllToAll);
  const Estimate flex = estimate(p, spec::TokenDispatcher::kFlex);
  EXPECT_LT(flex.time.ep_comm.value(), 0.5 * pairs.time.ep_comm.value());
  // The same dispatch and combine calls; the flex dispatch exchanges its layout itself: no counts
  // all-gather, one call fewer per MoE layer's forward (48 layers, 4 microbatches).
  EXPECT_EQ(pairs.calls_per_step.ep - flex.calls_per_step.ep, 48.0 * 4);
  p.ep = 8;
  p.etp = 2;
  EXPECT_EQ(estimate(p, spec::TokenDispatcher::kFlex).time.ep_comm.value(),
            estimate(p, spec::TokenDispatcher::kAllToAll).time.ep_comm.value());
}

// Flex runs where tokens leave the rank over ep, with expert-tp 1 and dropless routing; a capacity
// (DeepEP does not pad to it), no ep or expert-tp 2 leave the all-to-all.
TEST(FlexDispatch, RunsOnlyWithEpExpertTpOneAndDropless) {
  auto model = spec::find_catalog_model("qwen3-30b-a3b")->spec;
  const spec::ParallelConfig ep8{.dp = 8, .ep = 8};
  EXPECT_TRUE(spec::dispatcher_runs(spec::TokenDispatcher::kFlex, model, ep8));
  EXPECT_FALSE(spec::dispatcher_runs(spec::TokenDispatcher::kFlex, model, spec::ParallelConfig{.dp = 8}));
  EXPECT_FALSE(
      spec::dispatcher_runs(spec::TokenDispatcher::kFlex, model, spec::ParallelConfig{.dp = 8, .ep = 4, .etp = 2}));
  model.moe.capacity_factor = 1.0;
  EXPECT_FALSE(spec::dispatcher_runs(spec::TokenDispatcher::kFlex, model, ep8));
  EXPECT_TRUE(spec::dispatcher_runs(spec::TokenDispatcher::kAllToAll, model, ep8));
}

}  // namespace
}  // namespace cpt::cost
