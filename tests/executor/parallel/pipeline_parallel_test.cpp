// Pipeline parallelism in process: two Gloo ranks in threads, each holding stages of a one-device
// model (one layer each; the first also the embedding, the last the head), run a step of four
// microbatches under a schedule (PipelineExecutor interpreting spec::PipelineSchedule);
// the step's loss and each stage's gradients are the one-device model's over the same
// microbatches (the end-to-end layouts: tests/integration/distributed_train_test.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "executor/data/batch.h"
#include "executor/dist/communicator.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/pipeline_executor.h"
#include "executor/train/step_optimizer.h"
#include "tests/executor/executor_test_support.h"
#include "spec/model_catalog.h"
#include "spec/pipeline_schedule.h"

namespace cpt::exec {
namespace {

using Tensors = std::map<std::string, torch::Tensor>;

constexpr int kMicrobatches = 4;

// Tolerance, from the arithmetic: the stages compute the same operations on the same numbers as one
// device; only the gradient accumulation over microbatches and the loss's sum run in another
// order, which moves a sum of n fp32 terms by at most about n · 2⁻²⁴ of their magnitudes (below
// 10⁻⁴ of the largest value for this model's sums, n ≤ 512).
constexpr double kTolerance = 1e-4;

std::vector<Batch> microbatches(std::int64_t vocab) {
  std::vector<Batch> out;
  for (int i = 0; i < kMicrobatches; ++i)
    out.push_back(testing::causal_batch(2, 16, vocab, 3 + static_cast<std::uint64_t>(i)));
  return out;
}

// `virtual_stages` stages a rank, one layer each: rank r holds stages c · 2 + r.
void expect_two_ranks_match_one_device(spec::ScheduleKind kind, int virtual_stages) {
  spec::ModelSpec spec = spec::find_catalog_model("tiny").value().spec;
  const int num_stages = 2 * virtual_stages;
  spec.layers = num_stages;
  const auto micro = microbatches(spec.vocab);
  const double scale = 1.0 / (kMicrobatches * 2 * 15);
  LlamaModel whole(spec);
  whole->init_weights(7);
  double expected_loss = 0;
  for (const auto& b : micro) {
    const auto loss = whole->loss_sum(b);
    expected_loss += loss.item<double>();
    (loss * scale).backward();
  }
  Tensors weights, expected_grads;
  for (const auto& p : whole->named_parameters()) {
    weights[p.key()] = p.value().detach();
    expected_grads[p.key()] = p.value().grad().detach();
  }
  std::array<double, 2> losses{};
  std::array<Tensors, 2> grads;
  const spec::PipelineSchedule schedule = spec::make_schedule(kind, 2, virtual_stages, kMicrobatches);
  testing::on_two_gloo_ranks("pp/0", [&](int rank, Communicator& group) {
    std::vector<LlamaModel> chunks;
    NamedParams named;
    for (int stage = rank; stage < num_stages; stage += 2) {
      chunks.emplace_back(spec, StageShape{stage == 0, stage, stage + 1, stage == num_stages - 1});
      torch::NoGradGuard no_grad;
      for (auto& p : chunks.back()->named_parameters()) {
        p.value().copy_(weights.at(p.key()));
        named.emplace_back(p.key(), p.value());
      }
    }
    const auto solo = make_solo_communicator("dp");
    const auto optimizer = make_replicated_optimizer(named, spec::AdamWOptions{}, *solo, 1 << 20);
    PipelineExecutor executor(chunks, num_stages, group);
    losses[static_cast<std::size_t>(rank)] = executor.train_step(schedule, micro, scale, *optimizer).cross_entropy;
    for (const auto& [name, param] : named) grads[static_cast<std::size_t>(rank)][name] = param.grad();
  });
  EXPECT_EQ(grads[0].size() + grads[1].size(), expected_grads.size());
  for (std::size_t rank = 0; rank < 2; ++rank) {
    EXPECT_NEAR(losses[rank], expected_loss, kTolerance * expected_loss) << "rank " << rank;
    for (const auto& [name, grad] : grads[rank]) {
      EXPECT_LT(testing::relative_max_difference(grad, expected_grads.at(name)), kTolerance)
          << "rank " << rank << ": " << name;
    }
  }
}

TEST(PipelineParallel, OneFOneBOverTwoStagesGivesTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(spec::ScheduleKind::k1F1B, 1);
}

TEST(PipelineParallel, GPipeOverTwoStagesGivesTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(spec::ScheduleKind::kGPipe, 1);
}

// ZB-H1's split backward runs whole at BackwardInput (pipeline_executor.h): the same gradients.
TEST(PipelineParallel, ZeroBubbleOverTwoStagesGivesTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(spec::ScheduleKind::kZeroBubbleH1, 1);
}

// Interleaved 1F1B: two stages on each rank (four layers), microbatches passing each rank twice.
TEST(PipelineParallel, InterleavedOverTwoRanksGivesTheOneDeviceLossAndGradients) {
  expect_two_ranks_match_one_device(spec::ScheduleKind::kInterleaved1F1B, 2);
}

}  // namespace
}  // namespace cpt::exec
