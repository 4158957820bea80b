#include "costmodel/error_band.h"

#include <gtest/gtest.h>

#include "spec/hardware_catalog.h"

namespace cpt::cost {
namespace {

using spec::Runtime;

spec::GpuSpec gpu(const char* name) {
  return spec::HardwareCatalog::builtin().gpu(name, "--gpu");
}

TEST(ErrorBand, FamiliesOfTheCatalogGpus) {
  EXPECT_EQ(gpu_family(gpu("a100")), "ampere");
  EXPECT_EQ(gpu_family(gpu("a100-40g")), "ampere");
  EXPECT_EQ(gpu_family(gpu("h100")), "hopper");
  EXPECT_EQ(gpu_family(gpu("h200")), "hopper");
  EXPECT_EQ(gpu_family(gpu("b200")), "blackwell");
  spec::GpuSpec cpu;
  cpu.name = "local_cpu";
  EXPECT_EQ(gpu_family(cpu), "");
}

// Bands only where validation runs exist: fsdp and megatron on Ampere and Hopper; none for the
// runtimes nobody measured, on Blackwell or on a CPU.
TEST(ErrorBand, OnlyWhereValidationRunsExist) {
  for (const Runtime r : {Runtime::kFsdp, Runtime::kMegatron}) {
    for (const char* name : {"a100", "h100", "h200"}) {
      const auto band = error_band(r, gpu(name));
      ASSERT_TRUE(band) << spec::to_string(r) << " " << name;
      EXPECT_GT(band->rows, 0);
      EXPECT_LT(band->p10, band->p90);
      EXPECT_NE(std::string(band->source), "");
    }
  }
  for (const Runtime r : {Runtime::kDeepSpeed, Runtime::kTorchtitan, Runtime::kCpt}) {
    EXPECT_FALSE(error_band(r, gpu("h100"))) << spec::to_string(r);
  }
  EXPECT_FALSE(error_band(Runtime::kMegatron, gpu("b200")));
  const std::string none = describe_band(core::Seconds(2.0), Runtime::kTorchtitan, gpu("h100"));
  EXPECT_NE(none.find("no error band"), std::string::npos) << none;
  EXPECT_NE(none.find("torchtitan on hopper"), std::string::npos) << none;
}

// A step predicted at T lands between T / (1 + p90) and T / (1 + p10): the error is predicted /
// measured − 1.
TEST(ErrorBand, RangeInvertsTheError) {
  const ErrorBand band{-0.2, 0.25, 10, "test"};
  const StepTimeRange range = step_time_range(core::Seconds(1.0), band);
  EXPECT_DOUBLE_EQ(range.shortest.value(), 1.0 / 1.25);
  EXPECT_DOUBLE_EQ(range.longest.value(), 1.0 / 0.8);
  const std::string text = describe_band(core::Seconds(1.0), Runtime::kFsdp, gpu("h100"));
  EXPECT_NE(text.find("runs on hopper"), std::string::npos) << text;
}

}  // namespace
}  // namespace cpt::cost
