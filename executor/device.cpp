#include "executor/device.h"

#include <ATen/autocast_mode.h>
#include <sys/resource.h>

#ifdef CPT_EXECUTOR_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

torch::Device pick_device(const std::string& want) {
  const bool cuda = torch::cuda::is_available();
  if (want == "cpu") return torch::kCPU;
  if (want == "cuda") {
    if (!cuda) throw core::ConfigError("device \"cuda\": no CUDA device is visible (or this LibTorch has no CUDA)");
    return {torch::kCUDA, 0};
  }
  if (want != "auto") throw core::ConfigError(core::str_cat("device: expected auto, cpu or cuda, got \"", want, "\""));
  return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

AutocastGuard::AutocastGuard(const torch::Device& device) {
  if (!device.is_cuda()) return;
  active_ = true;
  previous_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCUDA, previous_enabled_);
  at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
}

std::int64_t peak_memory_bytes(const torch::Device& device) {
#ifdef CPT_EXECUTOR_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#else
  (void)device;
#endif
  struct rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

void synchronize(const torch::Device& device) {
#ifdef CPT_EXECUTOR_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

}  // namespace cpt::exec
