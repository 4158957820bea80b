// Data parallelism and ZeRO-1/2/3 in process: two Gloo ranks in threads, each with half of a batch,
// reduce their gradients and step AdamW through the step optimizer of their layout (replicated,
// sharded by bucket: train/step_optimizer.h, or fully sharded: parallel/fully_sharded.h); after two steps their weights
// are the one-device run's on the whole batch (the end-to-end layouts: tests/integration/distributed_train_test.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "executor/data/batch.h"
#include "executor/dist/communicator.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/fully_sharded.h"
#include "executor/train/step_optimizer.h"
#include "tests/executor/executor_test_support.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

using testing::causal_batch;

using Tensors = std::map<std::string, torch::Tensor>;
// The step optimizer of a layout for `model`'s parameters over the data-parallel group (ZeRO-3
// also installs itself as the model's parameter residency).
using MakeOptimizer = std::function<std::unique_ptr<StepOptimizer>(LlamaModel&, Communicator&)>;

constexpr std::size_t kSteps = 2;
constexpr double kLr = 1e-3;

// Tolerance, from the arithmetic: each rank's gradient is a sum over half the tokens, and the
// reduction adds the halves in another order than one device's backward: round-off apart (below
// 10⁻⁴ of a sum's terms here). AdamW's normalised update lr · m̂ / (√v̂ + ε) moves an element by at
// most about lr a step whatever its gradient, and round-off changes that by a small fraction except
// where |g| is near ε, where dividing by √v̂ + ε magnifies the gradient's absolute round-off. So
// weights may differ by a small part of one step's update; 1% of it (lr · 10⁻²) is far below what a
// missing, doubled or misplaced reduction gives (updates off by up to 2 · lr, and gradient norms off
// by the factor, checked to 10⁻⁴).
constexpr double kTolerance = 1e-2 * kLr;

Batch rows(const Batch& b, std::int64_t first, std::int64_t count) {
  auto targets = b.targets.narrow(0, first, count);
  return Batch{b.tokens.narrow(0, first, count),
               targets,
               b.positions.narrow(0, first, count),
               {},
               (targets != kIgnoreIndex).sum().item<std::int64_t>(),
               b.real_tokens.defined() ? b.real_tokens.narrow(0, first, count) : torch::Tensor()};
}

NamedParams named(LlamaModel& model) {
  NamedParams out;
  for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

// kSteps steps of `model` on `batch`, its loss the sum over `batch` divided by `loss_tokens` (the
// whole batch's, as the trainer divides every rank's), through `optimizer`; each step's gradient
// norm (AdamW's update hardly changes if the gradient is scaled: the norm does).
std::array<double, kSteps> train(LlamaModel& model, StepOptimizer& optimizer, const Batch& batch,
                                 std::int64_t loss_tokens) {
  std::array<double, kSteps> norms{};
  for (std::size_t step = 0; step < kSteps; ++step) {
    optimizer.before_backward(0, 1);
    (model->loss_sum(batch) / static_cast<double>(loss_tokens)).backward();
    optimizer.after_backward(0, 1);
    norms[step] = optimizer.grad_norm();
    optimizer.step(kLr, 1.0);
  }
  return norms;
}

Tensors weights_of(LlamaModel& model) {
  Tensors out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

void expect_two_replicas_match_one_device(const MakeOptimizer& make_optimizer) {
  const spec::ModelSpec spec = spec::find_catalog_model("tiny").value().spec;
  const Batch batch = causal_batch(4, 16, spec.vocab, 3);
  LlamaModel reference(spec);
  reference->init_weights(7);
  const auto solo = make_solo_communicator("dp");
  const auto single = make_replicated_optimizer(named(reference), spec::AdamWOptions{}, *solo, 1 << 20);
  const auto expected_norms = train(reference, *single, batch, batch.loss_tokens);
  const Tensors expected = weights_of(reference);

  std::array<Tensors, 2> trained;
  std::array<std::array<double, kSteps>, 2> norms{};
  testing::on_two_gloo_ranks("dp/0", [&](int rank, Communicator& group) {
    LlamaModel replica(spec);
    replica->init_weights(7);
    const auto optimizer = make_optimizer(replica, group);
    norms[static_cast<std::size_t>(rank)] = train(replica, *optimizer, rows(batch, 2 * rank, 2), batch.loss_tokens);
    auto* sharded = dynamic_cast<FullyShardedModel*>(optimizer.get());
    if (sharded != nullptr) sharded->gather_all();  // the whole weights, to compare
    trained[static_cast<std::size_t>(rank)] = weights_of(replica);
    if (sharded != nullptr) sharded->release_all();
  });
  for (std::size_t rank = 0; rank < 2; ++rank) {
    for (std::size_t step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(norms[rank][step], expected_norms[step], 1e-4 * expected_norms[step]) << "rank " << rank;
    }
    ASSERT_EQ(trained[rank].size(), expected.size());
    for (const auto& [name, weight] : expected) {
      EXPECT_LT((trained[rank].at(name) - weight).abs().max().item<double>(), kTolerance)
          << "rank " << rank << ": " << name;
    }
  }
}

// Small buckets (16 KiB of fp32 gradients) so that the model's gradients span several and the
// shards cut through parameters.
constexpr std::int64_t kBucketBytes = 16 << 10;

ZeroOptions zero_stage(int stage) {
  ZeroOptions zero;
  zero.stage = stage;
  zero.bucket_bytes = kBucketBytes;
  return zero;
}

TEST(DataParallel, ReplicatedTwoRanksGiveTheOneDeviceWeights) {
  expect_two_replicas_match_one_device([](LlamaModel& model, Communicator& group) {
    return make_replicated_optimizer(named(model), spec::AdamWOptions{}, group, kBucketBytes);
  });
}

TEST(DataParallel, ZeroOneTwoRanksGiveTheOneDeviceWeights) {
  expect_two_replicas_match_one_device([](LlamaModel& model, Communicator& group) {
    return make_zero_optimizer(named(model), spec::AdamWOptions{}, group, zero_stage(1));
  });
}

TEST(DataParallel, ZeroTwoTwoRanksGiveTheOneDeviceWeights) {
  expect_two_replicas_match_one_device([](LlamaModel& model, Communicator& group) {
    return make_zero_optimizer(named(model), spec::AdamWOptions{}, group, zero_stage(2));
  });
}

// ZeRO-3: every parameter sharded over the two ranks and gathered unit by unit for forward and
// backward (parallel/fully_sharded.h).
TEST(DataParallel, ZeroThreeTwoRanksGiveTheOneDeviceWeights) {
  expect_two_replicas_match_one_device([](LlamaModel& model, Communicator& group) -> std::unique_ptr<StepOptimizer> {
    auto sharded = make_fully_sharded(named(model), spec::AdamWOptions{}, group, nullptr, ModelParallelNorm{});
    model->set_parameter_residency(sharded.get());
    return sharded;
  });
}

}  // namespace
}  // namespace cpt::exec
