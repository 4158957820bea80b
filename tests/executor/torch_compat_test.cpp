#include "executor/torch_compat.h"

#include <gtest/gtest.h>
#include <torch/version.h>

namespace cpt::exec {
namespace {

TEST(TorchCompat, ReportsTheLibTorchItWasBuiltWith) {
  const auto info = torch_build_info();
  EXPECT_EQ(info.torch_version, TORCH_VERSION);
  EXPECT_GE(info.cpu_threads, 1);
#ifdef CPT_EXECUTOR_CUDA
  EXPECT_TRUE(info.cuda_compiled);
  EXPECT_FALSE(info.nccl_version.empty());
  EXPECT_EQ(info.nccl_version.rfind("2.", 0), 0u) << info.nccl_version;
#else
  EXPECT_FALSE(info.cuda_compiled);
#endif
}

TEST(TorchCompat, ComputesOnCpu) { EXPECT_DOUBLE_EQ(torch_smoke_compute(), 54.0); }

}  // namespace
}  // namespace cpt::exec
