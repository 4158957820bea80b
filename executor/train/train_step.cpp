#include "executor/train/train_step.h"

#include <cmath>
#include <limits>

#include "executor/device.h"

namespace cpt::exec {

StepResult train_step(LlamaModelImpl& model, AdamW& optimizer, const std::vector<Batch>& micro, double lr,
                      double grad_clip, const torch::Device& device) {
  StepResult r;
  for (const auto& b : micro) r.loss_tokens += b.loss_tokens;
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(r.loss_tokens, 1));
  double loss_sum = 0;
  {
    AutocastGuard autocast(device);
    for (const auto& b : micro) {
      const auto l = model.loss_sum(b.to(device));
      (l * scale).backward();
      loss_sum += l.item<double>();
    }
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
