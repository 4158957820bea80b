#pragma once
// AdamW (Loshchilov & Hutter 2019: decoupled weight decay) over named parameters, with no decay on
// norm weights and biases (is_no_decay_parameter). The update is LibTorch's fused kernel
// (at::_fused_adamw_, the one behind torch.optim.AdamW(fused=True)), so it computes what PyTorch
// computes. State is kept per parameter name, so checkpoints are independent of module order and
// the ZeRO optimizer can shard the same names.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "spec/train_config.h"

namespace cpt::exec {

using spec::AdamWOptions;  // TRAIN.json's "optimizer"

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWOptions options);
  // One update with learning rate `lr` from the parameters' .grad().
  void step(double lr);
  void zero_grad();
  // Named state tensors for checkpoints: "<param>/exp_avg", "<param>/exp_avg_sq", "<param>/step".
  [[nodiscard]] std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Copies `state` back; ConfigError (naming `origin`) when a name or shape is missing or differs.
  void load_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& origin);
  [[nodiscard]] const AdamWOptions& options() const { return options_; }
  // The two moments of every parameter, and the step counters (one fp32 scalar per parameter).
  [[nodiscard]] std::vector<torch::Tensor> moments() const;
  [[nodiscard]] std::vector<torch::Tensor> counters() const;

 private:
  struct Group {
    double weight_decay;
    std::vector<std::string> names;
    std::vector<torch::Tensor> params, exp_avg, exp_avg_sq, steps;
  };
  AdamWOptions options_;
  Group decay_, no_decay_;
  void step_group(Group& g, double lr);
};

}  // namespace cpt::exec
