#include "executor/device.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "executor/dist/launch_info.h"

namespace cpt::exec {
namespace {

TEST(CudaDeviceIndex, EachLocalRankTakesItsOwnDeviceWhereThereAreEnough) {
  EXPECT_EQ(cuda_device_index(8, 0, 8, false), 0);
  EXPECT_EQ(cuda_device_index(8, 5, 8, false), 5);
  EXPECT_EQ(cuda_device_index(8, 3, 4, true), 3);  // all visible: the local rank, binding or not
}

TEST(CudaDeviceIndex, ATaskBoundToOneGpuTakesDeviceZero) {
  // srun --gpus-per-task=1: local rank 3 of 4 sees one device, its own, as device 0.
  EXPECT_EQ(cuda_device_index(1, 3, 4, true), 0);
}

TEST(CudaDeviceIndex, TooFewDevicesWithoutABindingIsAConfigErrorThatCountsBoth) {
  try {
    cuda_device_index(1, 1, 2, false);
    FAIL() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "device \"cuda\": 2 ranks on this host need one CUDA device each, 1 visible");
  }
  EXPECT_THROW(cuda_device_index(2, 3, 4, true), core::ConfigError);  // two visible, four ranks
}

// Sets environment variables for a scope and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      if (value != nullptr) {
        ::setenv(name, value, 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Slurm's per-task GPU binding is read from the launch environment: srun --gpus-per-task=1 sets
// SLURM_GPUS_PER_TASK=1 and one device in CUDA_VISIBLE_DEVICES. One visible device alone (a node's
// single GPU shared by its tasks) is not a binding.
TEST(LaunchInfo, SlurmsOneGpuPerTaskBindingIsReadFromTheEnvironment) {
  {
    ScopedEnv env{{"SLURM_LOCALID", "3"}, {"SLURM_GPUS_PER_TASK", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}};
    EXPECT_TRUE(launch_info_from_env().gpu_bound_per_task);
  }
  {
    ScopedEnv env{{"SLURM_LOCALID", "3"}, {"SLURM_GPUS_PER_TASK", nullptr}, {"CUDA_VISIBLE_DEVICES", "0"}};
    EXPECT_FALSE(launch_info_from_env().gpu_bound_per_task);
  }
  {
    ScopedEnv env{{"SLURM_LOCALID", "1"}, {"SLURM_GPUS_PER_TASK", "2"}, {"CUDA_VISIBLE_DEVICES", "2,3"}};
    EXPECT_FALSE(launch_info_from_env().gpu_bound_per_task);
  }
  {
    ScopedEnv env{{"SLURM_LOCALID", nullptr}, {"SLURM_GPUS_PER_TASK", "1"}, {"CUDA_VISIBLE_DEVICES", "0"}};
    EXPECT_FALSE(launch_info_from_env().gpu_bound_per_task);  // not a Slurm task
  }
}

}  // namespace
}  // namespace cpt::exec
