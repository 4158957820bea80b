#include "executor/device.h"

#include <ATen/autocast_mode.h>
#include <sys/resource.h>

#include <fstream>

#ifdef CPT_EXECUTOR_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

namespace {

torch::Device cuda_device_of_local_rank(int local_rank, int local_ranks, bool bound_per_task) {
  const auto visible = static_cast<int>(torch::cuda::device_count());
  const int index = cuda_device_index(visible, local_rank, local_ranks, bound_per_task);
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#ifdef CPT_EXECUTOR_CUDA
  c10::cuda::set_device(device.index());
#endif
  return device;
}

}  // namespace

int cuda_device_index(int visible, int local_rank, int local_ranks, bool bound_per_task) {
  if (visible >= local_ranks) return local_rank;
  if (bound_per_task && visible == 1) return 0;
  throw core::ConfigError(core::str_cat("device \"cuda\": ", local_ranks, " ranks on this host need one CUDA device each, ",
                                        visible, " visible"));
}

void check_device(const std::string& want, int local_ranks, bool bound_per_task) {
  if (want == "cuda") {
    if (!torch::cuda::is_available()) throw core::ConfigError("device \"cuda\": no CUDA device is visible (or this LibTorch has no CUDA)");
    (void)cuda_device_index(static_cast<int>(torch::cuda::device_count()), 0, local_ranks, bound_per_task);
  } else if (want != "cpu" && want != "auto") {
    throw core::ConfigError(core::str_cat("device: expected auto, cpu or cuda, got \"", want, "\""));
  }
}

torch::Device pick_device(const std::string& want, int local_rank, int local_ranks, bool bound_per_task) {
  check_device(want, local_ranks, bound_per_task);
  if (want == "cpu") return torch::kCPU;
  if (want == "cuda") return cuda_device_of_local_rank(local_rank, local_ranks, bound_per_task);
  // "auto" takes the GPUs only where every local rank gets its own (NCCL needs one per rank).
  const auto visible = static_cast<int>(torch::cuda::device_count());
  const bool enough = torch::cuda::is_available() && (visible >= local_ranks || (bound_per_task && visible == 1));
  return enough ? cuda_device_of_local_rank(local_rank, local_ranks, bound_per_task) : torch::Device(torch::kCPU);
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

std::string device_name(const torch::Device& device) {
#ifdef CPT_EXECUTOR_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  if (device.is_cuda()) return "CUDA device";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto start = line.find_first_not_of(" \t", line.find(':') + 1);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  }
  return "";
}

std::int64_t device_memory_bytes(const torch::Device& device) {
#ifdef CPT_EXECUTOR_CUDA
  if (device.is_cuda()) return static_cast<std::int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  (void)device;
  return 0;
}

}  // namespace cpt::exec
