#pragma once
// When a model's parameters are whole. A plain model's always are; under ZeRO-3
// (parallel/fully_sharded.h) each rank keeps only its shard and a unit's parameters are gathered
// just before the unit runs and released right after, in forward and again in backward. The model
// tells its residency when units run; the residency decides what to gather, release or hook.
#include <torch/torch.h>

namespace cpt::exec {

class ParameterResidency {
 public:
  virtual ~ParameterResidency() = default;
  static constexpr int kRoot = -1;  // the embedding, the final norm and the LM head
  // Before unit `unit` (a layer index, or kRoot at the start of the whole forward) runs forward.
  virtual void before_forward(int unit) = 0;
  // After it: `output` is the unit's output (kRoot: the logits). Returns the tensor to use
  // instead (the same values; it may carry a hook that gathers the unit again for backward).
  virtual torch::Tensor after_forward(int unit, const torch::Tensor& output) = 0;
};

}  // namespace cpt::exec
