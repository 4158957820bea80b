// Expert parallelism (executor/parallel/expert_parallel.h) with two ranks as two threads of this
// process over Gloo: the dispatch plans of the header's worked example and of an etp group, and
// the MoE layer with its experts split over the two ranks (ep 2), or each expert's MLP split over
// them (etp 2), against the layer holding every expert whole — the same outputs for each rank's
// tokens and the same gradients (each expert's summed over both ranks' tokens). The layer on
// sequence shards: sequence_sharded_experts_test.cpp.
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

// An etp group of two (ep 1), E = 4: each member receives its own pairs, [3 1 0 2] and [1 2 2 1],
// and computes both members' rows of each expert.
TEST(ExpertParallel, DispatchPlanOfAnExpertTensorParallelGroup) {
  std::vector<ExpertDispatch> plans(2);
  on_two_ranks([&](int rank, Communicator& group) {
    const auto per_expert =
        rank == 0 ? torch::tensor({3, 1, 0, 2}, torch::kInt64) : torch::tensor({1, 2, 2, 1}, torch::kInt64);
    plans[static_cast<std::size_t>(rank)] = plan_expert_dispatch(per_expert, ExpertParallel{nullptr, &group});
  });
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const auto& plan = plans[rank];
    EXPECT_EQ(plan.etp_rows, (std::vector<std::int64_t>{6, 6}));
    EXPECT_EQ(plan.rows_per_local_expert, (std::vector<std::int64_t>{4, 3, 2, 3}));
    EXPECT_TRUE(torch::equal(plan.by_expert, torch::arange(6, torch::kInt64))) << plan.by_expert;
    // Expert 0: member 0's rows 0-2, member 1's row 6; expert 1: 3, then 7-8; expert 2: 9-10;
    // expert 3: 4-5, then 11.
    EXPECT_TRUE(torch::equal(plan.etp_by_expert, torch::tensor({0, 1, 2, 6, 3, 7, 8, 9, 10, 4, 5, 11}, torch::kInt64)))
        << plan.etp_by_expert;
  }
}

// How the two ranks split the routed experts: ep 2 (half the experts each) or etp 2 (half of each
// expert's MLP each).
enum class ExpertSplit { kExperts, kExpertMlps };

// The layer with its experts over two ranks computes, for each rank's tokens, what the whole layer
// computes for them; its gradients are the whole layer's: the router's and shared experts' summed
// over the ranks (as data parallelism sums them), each routed expert's on its rank already whole
// (or, split over etp, its rank's slice of the whole gradient).
// `starve_second_rank`: every token prefers experts 0 and 1, so rank 1 receives no rows at all.
void expect_expert_parallel_layer_matches_the_whole(spec::ModelSpec m, bool starve_second_rank = false,
                                                    ExpertSplit split = ExpertSplit::kExperts) {
  const bool mlps = split == ExpertSplit::kExpertMlps;
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
  std::vector<std::map<std::string, torch::Tensor>> expected_slices(2);
  on_two_ranks([&](int rank, Communicator& group) {
    const ParameterSplits splits{TensorParallel{}, TensorParallel{mlps ? &group : nullptr}};
    MoeMlp part(m, mlps ? ExpertParallel{nullptr, &group} : ExpertParallel{&group});
    {
      torch::NoGradGuard no_grad;
      const auto source = whole->named_parameters();
      for (auto& p : part->named_parameters()) {
        p.value().copy_(tp_shard_of_full("layers.0.mlp." + p.key(), source[p.key()], m.vocab, splits));
      }
    }
    part->train();
    const auto r = static_cast<std::size_t>(rank);
    const auto out = part->forward(tokens[r]);
    outputs[r] = out.detach();
    out.mul(weights[r]).sum().backward();
    grads[r] = testing::gradients_by_name(*part);
    first_expert[r] = part->first_expert();
    if (mlps) {  // this rank's slice of each routed expert's whole gradient
      for (auto& [name, grad] : grads[r]) {
        if (!name.starts_with("experts.")) continue;
        expected_slices[r][name] = tp_shard_of_full("layers.0.mlp." + name, whole_grads.at(name), m.vocab, splits);
      }
    }
  });
  EXPECT_EQ(first_expert, (std::vector<std::int64_t>{0, mlps ? 0 : m.moe.experts / 2}));
  // The same products per row, in GEMMs of other shapes (and with etp the two halves of each
  // expert's FFN summed apart): fp32 reordering.
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_LE(testing::relative_max_difference(outputs[r], whole_out[r]),
              testing::moe_layer_reordering_bound(m, mlps ? 1 : 0))
        << "rank " << r;
  }
  for (const auto& [name, whole_grad] : whole_grads) {
    const bool routed = name.starts_with("experts.");
    torch::Tensor got, expected = whole_grad;
    if (routed && mlps) {
      for (std::size_t r = 0; r < 2; ++r) {
        const auto& slice = expected_slices[r].at(name);
        const double largest = whole_grad.abs().max().item<double>();
        EXPECT_LE((grads[r].at(name) - slice).abs().max().item<double>(), 36 * std::ldexp(1.0, -24) * largest + 1e-9)
            << name << " on rank " << r;
      }
      continue;
    }
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

TEST(ExpertParallel, LayerWithEachExpertSplitOverTwoRanksMatchesTheWholeLayer) {
  const auto m = spec::find_catalog_model("tiny-moe").value().spec;
  expect_expert_parallel_layer_matches_the_whole(m, false, ExpertSplit::kExpertMlps);
  // Rank 1's tokens all go to experts 0 and 1: the gather still carries rank 0's rows to it.
  expect_expert_parallel_layer_matches_the_whole(m, true, ExpertSplit::kExpertMlps);
}

TEST(ExpertParallel, LayerOverTwoRanksMatchesTheWholeLayerWithACapacity) {
  auto m = spec::find_catalog_model("tiny-moe").value().spec;
  m.moe.capacity_factor = 0.75;  // each rank drops over its own tokens, as data parallelism does
  m.moe.shared_ffn_hidden = 0;
  expect_expert_parallel_layer_matches_the_whole(m);
}

}  // namespace
}  // namespace cpt::exec
