#pragma once
// The training device and the few device-specific facilities the trainer needs: choosing the
// device, bf16 autocast on CUDA (fp32 master weights stay fp32), and peak memory.
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace cpt::exec {

// "cpu", "cuda" or "auto" (CUDA when a device is visible). ConfigError for "cuda" without one.
// On CUDA, local rank r of `local_ranks` on this host takes device cuda_device_index(...) and makes
// it current (ConfigError when fewer devices are visible than local ranks and the launcher did not
// bind one per task: NCCL needs one per rank; "auto" then takes the CPU).
torch::Device pick_device(const std::string& want, int local_rank = 0, int local_ranks = 1, bool bound_per_task = false);

// pick_device's ConfigErrors for `local_ranks` ranks on this host, without touching a device: the
// launcher checks once what each rank it starts would otherwise report by itself.
void check_device(const std::string& want, int local_ranks, bool bound_per_task = false);

// The CUDA device local rank `local_rank` of `local_ranks` takes among `visible` devices: its own
// index where every local rank has a device; device 0 where the launcher bound one GPU to each task
// (`bound_per_task`: LaunchInfo::gpu_bound_per_task, Slurm's srun --gpus-per-task=1). ConfigError
// otherwise, naming how many ranks need devices and how many are visible.
int cuda_device_index(int visible, int local_rank, int local_ranks, bool bound_per_task);

// bf16 autocast for CUDA devices while alive; nothing on the CPU, where bf16 matmuls are slow on
// the machines cpt tests on and fp32 keeps the CPU runs exactly comparable.
class AutocastGuard {
 public:
  explicit AutocastGuard(const torch::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kHalf;
};

// Peak memory of this process on `device` since the start (CPU: the peak resident set size from
// getrusage, which includes LibTorch itself; CUDA: the caching allocator's peak allocated bytes).
std::int64_t peak_memory_bytes(const torch::Device& device);

// Waits for queued device work (timing); nothing on the CPU.
void synchronize(const torch::Device& device);

// The CUDA device's name ("NVIDIA H200") and memory; on the CPU, its model name from
// /proc/cpuinfo ("" where unknown) and 0.
std::string device_name(const torch::Device& device);
std::int64_t device_memory_bytes(const torch::Device& device);

}  // namespace cpt::exec
