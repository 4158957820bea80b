// Expert parallelism (executor/parallel/expert_parallel.h) with two ranks as two threads of this
// process over Gloo: the dispatch plan of the header's worked example, and the MoE layer with its
// experts split over the two ranks against the layer holding every expert — the same outputs for
// each rank's tokens and the same gradients (each expert's summed over both ranks' tokens). The
// layer on sequence shards: sequence_sharded_experts_test.cpp.
#include "executor/parallel/expert_parallel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/executor/executor_test_support.h"
#include "executor/model/moe_mlp.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

// Two ranks as threads over Gloo (executor_test_support.h).
void on_two_ranks(const std::function<void(int, Communicator&)>& rank_main) {
  testing::on_two_gloo_ranks("ep/0", rank_main);
}

TEST(ExpertParallel, DispatchPlanOfTheWorkedExample) {
  std::vector<ExpertDispatch> plans(2);
  on_two_ranks([&](int rank, Communicator& group) {
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

// The layer with its experts over two ranks computes, for each rank's tokens, what the whole layer
// computes for them; its gradients are the whole layer's: the router's and shared experts' summed
// over the ranks (as data parallelism sums them), each routed expert's on its rank already whole.
// `starve_second_rank`: every token prefers experts 0 and 1, so rank 1 receives no rows at all.
void expect_expert_parallel_layer_matches_the_whole(spec::ModelSpec m, bool starve_second_rank = false) {
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
  const auto whole_grads = testing::gradients_by_name(*whole);

  std::vector<torch::Tensor> outputs(2);
  std::vector<std::map<std::string, torch::Tensor>> grads(2);
  std::vector<std::int64_t> first_expert(2);
  on_two_ranks([&](int rank, Communicator& group) {
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
    grads[r] = testing::gradients_by_name(*part);
    first_expert[r] = part->first_expert();
  });
  EXPECT_EQ(first_expert, (std::vector<std::int64_t>{0, m.moe.experts / 2}));
  // The same products per row, in GEMMs of other shapes: fp32 reordering.
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_LE(testing::relative_max_difference(outputs[r], whole_out[r]), testing::moe_layer_reordering_bound(m, 0))
        << "rank " << r;
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
  expect_expert_parallel_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec);
}

TEST(ExpertParallel, ARankThatReceivesNoTokensStillJoinsBothExchanges) {
  expect_expert_parallel_layer_matches_the_whole(spec::find_catalog_model("tiny-moe").value().spec, true);
}

TEST(ExpertParallel, LayerOverTwoRanksMatchesTheWholeLayerWithACapacity) {
  auto m = spec::find_catalog_model("tiny-moe").value().spec;
  m.moe.capacity_factor = 0.75;  // each rank drops over its own tokens, as data parallelism does
  m.moe.shared_ffn_hidden = 0;
  expect_expert_parallel_layer_matches_the_whole(m);
}

}  // namespace
}  // namespace cpt::exec
