#include "executor/device.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

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

}  // namespace
}  // namespace cpt::exec
