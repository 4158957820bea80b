#include "executor/train/train_step.h"

#include <cmath>
#include <limits>

#include "executor/device.h"

namespace cpt::exec {

StepResult train_step(LlamaModelImpl& model, AdamW& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device, const DataParallel& dp) {
  StepResult r;
  for (const auto& b : micro) r.loss_tokens += b.loss_tokens;
  const bool replicated = dp.dp != nullptr && dp.dp->size() > 1;
  if (replicated) {  // the step's loss tokens over every replica
    auto t = torch::tensor({static_cast<double>(r.loss_tokens)}, torch::kFloat64);
    dp.dp->all_reduce_sum(t)->wait();
    r.loss_tokens = static_cast<std::int64_t>(t.item<double>());
  }
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  double loss_sum = 0;
  {
    AutocastGuard autocast(device);
    for (std::size_t i = 0; i < micro.size(); ++i) {
      const auto l = model.loss_sum(micro[i].to(device));
      if (dp.grads != nullptr && i + 1 == micro.size()) dp.grads->arm();
      (l * scale).backward();
      loss_sum += l.item<double>();
    }
    if (dp.grads != nullptr) dp.grads->finish();
  }
  if (replicated) {
    auto t = torch::tensor({loss_sum}, torch::kFloat64);
    dp.dp->all_reduce_sum(t)->wait();
    loss_sum = t.item<double>();
  }
  r.loss = loss_sum * scale;
  const double max_norm = grad_clip > 0 ? grad_clip : std::numeric_limits<double>::infinity();
  r.grad_norm = torch::nn::utils::clip_grad_norm_(model.parameters(), max_norm);
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) optimizer.step(lr);
  optimizer.zero_grad();
  return r;
}

}  // namespace cpt::exec
