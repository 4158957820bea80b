#pragma once
// A callback after autograd has added a gradient into a parameter's .grad (LibTorch's
// PostAccumulateGradHook, which wants a hook object; this takes a callable). Used by the
// data-parallel buckets, ZeRO-1/2 and ZeRO-3 to learn when a parameter's gradient is in. One hook
// per parameter: setting one replaces the previous.
#include <torch/torch.h>

#include <functional>

namespace cpt::exec {

void set_gradient_hook(const torch::Tensor& param, std::function<void()> on_accumulated);
void clear_gradient_hook(const torch::Tensor& param);

}  // namespace cpt::exec
