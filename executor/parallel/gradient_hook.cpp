#include "executor/parallel/gradient_hook.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

namespace cpt::exec {

namespace {

class CallbackHook : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CallbackHook(std::function<void()> f) : f_(std::move(f)) {}
  void operator()(const torch::autograd::Variable&) override { f_(); }

 private:
  std::function<void()> f_;
};

}  // namespace

void set_gradient_hook(const torch::Tensor& param, std::function<void()> on_accumulated) {
  torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<CallbackHook>(std::move(on_accumulated)));
}

void clear_gradient_hook(const torch::Tensor& param) { torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr); }

}  // namespace cpt::exec
