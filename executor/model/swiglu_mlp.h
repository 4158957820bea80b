#pragma once
// The SwiGLU MLP of a LLaMA-family block (Shazeer 2020): down(silu(gate(x)) * up(x)), hidden H to
// inner width F and back. Also one expert of a mixture of experts (moe_mlp.h), at the expert's width.
// Under tensor parallelism (tensor_parallel.h) gate and up are column-parallel and down
// row-parallel: each rank holds F/tp of the inner width.
#include <torch/torch.h>

#include <cstdint>

#include "executor/parallel/tensor_parallel.h"

namespace cpt::exec {

class SwiGluMlpImpl : public torch::nn::Module {
 public:
  // `width`: the whole inner width F (divisible by tp's size).
  SwiGluMlpImpl(std::int64_t hidden, std::int64_t width, const TensorParallel& tp = {});
  // [..., H] -> [..., H].
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  TensorParallel tp_;
};
TORCH_MODULE(SwiGluMlp);

}  // namespace cpt::exec
