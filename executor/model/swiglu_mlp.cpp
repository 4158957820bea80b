#include "executor/model/swiglu_mlp.h"

namespace cpt::exec {

namespace {
torch::nn::Linear linear(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}
}  // namespace

SwiGluMlpImpl::SwiGluMlpImpl(std::int64_t hidden, std::int64_t width, const TensorParallel& tp) : tp_(tp) {
  const std::int64_t local = width / tp.size();
  gate_proj = register_module("gate_proj", linear(hidden, local));
  up_proj = register_module("up_proj", linear(hidden, local));
  down_proj = register_module("down_proj", linear(local, hidden));
}

torch::Tensor SwiGluMlpImpl::forward(const torch::Tensor& x_in) {
  const auto x = enter_tp_region(x_in, tp_);
  return leave_tp_region(down_proj(torch::silu(gate_proj(x)) * up_proj(x)), tp_);
}

}  // namespace cpt::exec
