#include "executor/train/train_step.h"

#include <cmath>
#include <limits>

#include <ATen/record_function.h>

#include "executor/device.h"
#include "executor/measure/op_kind.h"
#include "executor/parallel/pipeline_executor.h"

namespace cpt::exec {

namespace {

// Σ of the loss tokens of this rank's microbatches over the data-parallel group.
std::int64_t step_loss_tokens(const std::vector<Batch>& micro, Communicator& dp) {
  std::int64_t n = 0;
  for (const auto& b : micro) n += b.loss_tokens;
  if (dp.size() > 1) {
    auto t = torch::tensor({static_cast<double>(n)}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    n = static_cast<std::int64_t>(t.item<double>());
  }
  return n;
}

// The norm, clipping and update once the gradients are in.
void finish_step(StepResult& r, StepOptimizer& optimizer, double lr, double grad_clip) {
  RECORD_USER_SCOPE(kOptimizerScope);  // a step profile's "optimizer" (measure/op_kind.h)
  r.state = optimizer.state_bytes();
  r.grad_norm = optimizer.grad_norm();
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) {
    const double clip = grad_clip > 0 ? std::min(1.0, grad_clip / (r.grad_norm + 1e-6)) : 1.0;
    optimizer.step(lr, clip);
  } else {
    optimizer.zero_grad();
  }
}

}  // namespace

StepResult train_step_pipelined(PipelineExecutor& pipeline, const spec::PipelineSchedule& schedule,
                                StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr, double grad_clip,
                                const torch::Device& device, Communicator& dp, const Ewc* ewc, double ewc_lambda) {
  StepResult r;
  r.loss_tokens = step_loss_tokens(micro, dp);
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  std::vector<Batch> on_device;
  for (const auto& b : micro) on_device.push_back(b.to(device));
  PipelineExecutor::StepSums sums;
  {
    AutocastGuard autocast(device);
    sums = pipeline.train_step(schedule, on_device, scale, optimizer);
  }
  if (dp.size() > 1) {
    auto t = torch::tensor({sums.cross_entropy, sums.kl}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    sums = {t[0].item<double>(), t[1].item<double>()};
  }
  r.loss = sums.cross_entropy * scale;
  r.kl = sums.kl * scale;
  if (ewc != nullptr) {
    std::vector<LlamaModelImpl*> chunks;
    for (auto& c : pipeline.chunks()) chunks.push_back(c.get());
    r.ewc_penalty = ewc->penalty_value(chunks, ewc_lambda, &pipeline.group());
  }
  finish_step(r, optimizer, lr, grad_clip);
  return r;
}

StepResult train_step(LlamaModelImpl& model, StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, Communicator& dp, const Objective& objective) {
  StepResult r;
  r.loss_tokens = step_loss_tokens(micro, dp);
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  double loss_sum = 0, kl_total = 0;
  {
    AutocastGuard autocast(device);
    const int n = static_cast<int>(micro.size());
    for (int i = 0; i < n; ++i) {
      const auto b = micro[static_cast<std::size_t>(i)].to(device);
      const auto logits = model.forward(b);
      const auto ce = model.loss_sum_of_logits(logits, b.targets);
      auto total = ce;
      if (objective.teacher != nullptr) {
        const auto kl = kl_sum(logits, objective.teacher->logits(b), b.targets, model.tp().group);
        total = total + kl * objective.kl_lambda;
        kl_total += kl.item<double>();
      }
      total = total * scale;
      if (objective.ewc != nullptr && i + 1 == n) {
        // Once per step; every data-parallel replica adds its share (Ewc::penalty), so the summed
        // gradient has it once.
        const auto penalty = objective.ewc->penalty(model, objective.ewc_lambda);
        r.ewc_penalty = objective.ewc->whole_penalty(model, penalty, objective.ewc_lambda);
        total = total + penalty;
      }
      optimizer.before_backward(i, n);
      total.backward();
      optimizer.after_backward(i, n);
      loss_sum += ce.item<double>();
    }
  }
  if (dp.size() > 1) {
    auto t = torch::tensor({loss_sum, kl_total}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    loss_sum = t[0].item<double>();
    kl_total = t[1].item<double>();
  }
  r.loss = loss_sum * scale;
  r.kl = kl_total * scale;
  finish_step(r, optimizer, lr, grad_clip);
  return r;
}

}  // namespace cpt::exec
