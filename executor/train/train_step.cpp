#include "executor/train/train_step.h"

#include <cmath>
#include <limits>

#include "executor/device.h"

namespace cpt::exec {

StepResult train_step(LlamaModelImpl& model, StepOptimizer& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, Communicator& dp) {
  StepResult r;
  for (const auto& b : micro) r.loss_tokens += b.loss_tokens;
  if (dp.size() > 1) {  // the step's loss tokens over every replica
    auto t = torch::tensor({static_cast<double>(r.loss_tokens)}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    r.loss_tokens = static_cast<std::int64_t>(t.item<double>());
  }
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  double loss_sum = 0;
  {
    AutocastGuard autocast(device);
    const int n = static_cast<int>(micro.size());
    for (int i = 0; i < n; ++i) {
      const auto l = model.loss_sum(micro[static_cast<std::size_t>(i)].to(device));
      optimizer.before_backward(i, n);
      (l * scale).backward();
      optimizer.after_backward(i, n);
      loss_sum += l.item<double>();
    }
  }
  if (dp.size() > 1) {
    auto t = torch::tensor({loss_sum}, torch::kFloat64);
    dp.all_reduce_sum(t)->wait();
    loss_sum = t.item<double>();
  }
  r.loss = loss_sum * scale;
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
