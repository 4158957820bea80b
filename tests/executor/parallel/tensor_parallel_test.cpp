// Tensor and sequence parallelism in process: two Gloo ranks in threads, each holding its shard of
// a one-device model's weights (tp_shard_of_full), give that model's loss and, gathered
// (tp_full_from_shards), its gradients — the picotron-style check of the parallel layers without
// the launcher (the end-to-end layouts: tests/integration/distributed_train_test.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <map>
#include <string>

#include "executor/data/batch.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/tensor_parallel.h"
#include "tests/executor/executor_test_support.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

using testing::causal_batch;

using Tensors = std::map<std::string, torch::Tensor>;

// Tolerance, from the arithmetic: a rank's share of a GEMM or reduction sums fewer fp32 terms in
// another order, and the loss and gradients are sums over at most the vocabulary (512) of them,
// chained through two layers; reordering a sum of n fp32 terms moves it by at most about
// n · 2⁻²⁴ of their magnitudes (3·10⁻⁵ for n = 512), so 10⁻⁴ of the largest value bounds it.
constexpr double kTolerance = 1e-4;

void expect_two_ranks_match_one_device(bool sequence_parallel) {
  const spec::ModelSpec spec = spec::find_catalog_model("tiny").value().spec;  // heads 4, kv 2, ffn 176
  LlamaModel whole(spec);
  whole->init_weights(7);
  const Batch batch = causal_batch(2, 16, spec.vocab, 3);  // 16 positions: 8 a rank under SP
  const auto reference_loss = whole->loss_sum(batch);
  reference_loss.backward();
  Tensors weights, reference_grads;
  for (const auto& p : whole->named_parameters()) {
    weights[p.key()] = p.value().detach();
    reference_grads[p.key()] = p.value().grad().detach();
  }
  std::array<double, 2> losses{};
  std::array<Tensors, 2> gathered;
  testing::on_two_gloo_ranks("tp/0", [&](int rank, Communicator& group) {
    const TensorParallel tp{&group, sequence_parallel};
    LlamaModel part(spec, StageShape{}, tp);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : part->named_parameters()) {
        p.value().copy_(tp_shard_of_full(p.key(), weights.at(p.key()), spec.vocab, tp));
      }
    }
    const auto loss = part->loss_sum(batch);
    loss.backward();
    losses[static_cast<std::size_t>(rank)] = loss.item<double>();
    for (const auto& p : part->named_parameters()) {
      gathered[static_cast<std::size_t>(rank)][p.key()] =
          tp_full_from_shards(p.key(), p.value().grad(), spec.vocab, tp);
    }
  });
  const double expected = reference_loss.item<double>();
  for (std::size_t rank = 0; rank < 2; ++rank) {
    EXPECT_NEAR(losses[rank], expected, kTolerance * std::abs(expected)) << "rank " << rank;
    ASSERT_EQ(gathered[rank].size(), reference_grads.size());
    for (const auto& [name, grad] : reference_grads) {
      EXPECT_LT(testing::relative_max_difference(gathered[rank].at(name), grad), kTolerance)
          << "rank " << rank << ": " << name;
    }
  }
}

TEST(TensorParallel, TwoRanksGiveTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(false);
}

// Under sequence parallelism the norms see half the positions each: their gradients are summed
// over the group in backward (RMSNorm with the tp group), and the whole gradient comes back.
TEST(TensorParallel, SequenceParallelTwoRanksGiveTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(true);
}

}  // namespace
}  // namespace cpt::exec
