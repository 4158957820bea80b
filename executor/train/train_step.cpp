#include "executor/train/train_step.h"

#include <cmath>
#include <limits>

#include "executor/device.h"

namespace cpt::exec {

StepResult train_step(LlamaModelImpl& model, StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, Communicator& dp, const Objective& objective) {
  StepResult r;
  for (const auto& b : micro) r.loss_tokens += b.loss_tokens;
  if (dp.size() > 1) {  // the step's loss tokens over every replica
    auto t = torch::tensor({static_cast<double>(r.loss_tokens)}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    r.loss_tokens = static_cast<std::int64_t>(t.item<double>());
  }
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  double loss_sum = 0, kl_total = 0;
  {
    AutocastGuard autocast(device);
    const int n = static_cast<int>(micro.size());
    for (int i = 0; i < n; ++i) {
      const auto b = micro[static_cast<std::size_t>(i)].to(device);
      const auto logits = model.forward(b);
      const auto ce = cross_entropy_sum(logits, b.targets);
      auto total = ce;
      if (objective.teacher != nullptr) {
        const auto kl = kl_sum(logits, objective.teacher->logits(b), b.targets);
        total = total + kl * objective.kl_lambda;
        kl_total += kl.item<double>();
      }
      total = total * scale;
      if (objective.ewc != nullptr && i + 1 == n) {
        // Once per step; every data-parallel replica adds 1/dp of it, so the summed gradient has it once.
        const auto penalty = objective.ewc->penalty(model, objective.ewc_lambda);
        r.ewc_penalty = penalty.item<double>();
        total = total + penalty / static_cast<double>(dp.size());
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
  r.grad_norm = optimizer.grad_norm();
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) {
    const double clip = grad_clip > 0 ? std::min(1.0, grad_clip / (r.grad_norm + 1e-6)) : 1.0;
    optimizer.step(lr, clip);
  } else {
    optimizer.zero_grad();
  }
  return r;
}

}  // namespace cpt::exec
