#include "executor/torch_compat.h"

#include <torch/torch.h>
#include <torch/version.h>

#ifdef CPT_EXECUTOR_CUDA
#include <torch/csrc/cuda/nccl.h>
#endif

#include "core/str_cat.h"

namespace cpt::exec {

TorchBuildInfo torch_build_info() {
  TorchBuildInfo info;
  info.torch_version = TORCH_VERSION;
  info.cpu_threads = at::get_num_threads();
#ifdef CPT_EXECUTOR_CUDA
  info.cuda_compiled = true;
  info.cuda_devices = static_cast<int>(torch::cuda::device_count());
  // LibTorch packs the version as (major << 32) | (minor << 16) | patch.
  const std::uint64_t v = torch::cuda::nccl::version();
  info.nccl_version = core::str_cat(v >> 32, ".", (v >> 16) & 0xFFFF, ".", v & 0xFFFF);
#endif
  return info;
}

double torch_smoke_compute() {
  const auto a = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kFloat64).reshape({2, 2});
  return a.matmul(a).sum().item<double>();
}

}  // namespace cpt::exec
