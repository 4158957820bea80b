#include "costmodel/runtime_profile.h"

#include <gtest/gtest.h>

#include <variant>

#include "costmodel/layer_costs.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::cost {
namespace {

using spec::Runtime;

constexpr Runtime kAll[] = {Runtime::kMegatron, Runtime::kDeepSpeed, Runtime::kFsdp, Runtime::kTorchtitan,
                            Runtime::kCpt};

TEST(Runtime, NamesRoundTrip) {
  for (const Runtime r : kAll) EXPECT_EQ(spec::runtime_from_string(spec::to_string(r)), r);
  EXPECT_FALSE(spec::runtime_from_string("Megatron"));
  EXPECT_FALSE(spec::runtime_from_string(""));
  EXPECT_EQ(spec::runtime_names(), (std::vector<std::string>{"megatron", "deepspeed", "fsdp", "torchtitan", "cpt"}));
}

// Megatron-LM is the reference: its profile is the default options.
TEST(RuntimeProfile, MegatronIsTheDefaults) {
  const CostModelOptions defaults;
  const CostModelOptions megatron = for_runtime(defaults, Runtime::kMegatron);
  EXPECT_EQ(megatron.runtime, Runtime::kMegatron);
  EXPECT_EQ(megatron.dispatch, defaults.dispatch);
  EXPECT_EQ(megatron.context_parallel, defaults.context_parallel);
  EXPECT_EQ(megatron.fp32_main_grads, defaults.fp32_main_grads);
  EXPECT_EQ(megatron.bucket_elements, defaults.bucket_elements);
  EXPECT_EQ(megatron.attention_kernel_scale, 1.0);
  EXPECT_EQ(megatron.memory_traffic_scale, 1.0);
  EXPECT_EQ(megatron.fp8_gemm_scale, 1.0);
}

// Each runtime's fields are set whatever the options held before: a profile applied over another
// is the profile applied over the defaults (the rest of the options kept).
TEST(RuntimeProfile, AProfileReplacesTheLastOne) {
  CostModelOptions precise;
  precise.precision = spec::Precision::kFp8;
  for (const Runtime first : kAll) {
    for (const Runtime second : kAll) {
      const CostModelOptions twice = for_runtime(for_runtime(precise, first), second);
      const CostModelOptions once = for_runtime(precise, second);
      EXPECT_EQ(twice.runtime, once.runtime);
      EXPECT_EQ(twice.dispatch, once.dispatch);
      EXPECT_EQ(twice.context_parallel, once.context_parallel);
      EXPECT_EQ(twice.fp32_main_grads, once.fp32_main_grads);
      EXPECT_EQ(twice.bucket_elements, once.bucket_elements);
      EXPECT_EQ(twice.attention_kernel_scale, once.attention_kernel_scale);
      EXPECT_EQ(twice.memory_traffic_scale, once.memory_traffic_scale);
      EXPECT_EQ(twice.fp8_gemm_scale, once.fp8_gemm_scale);
      EXPECT_EQ(twice.precision, spec::Precision::kFp8);
    }
  }
}

TEST(RuntimeProfile, EachRuntimeDepartsWhereItsFrameworkDoes) {
  const CostModelOptions cpt = for_runtime({}, Runtime::kCpt);
  EXPECT_EQ(cpt.dispatch, KernelDispatch::kEager);
  EXPECT_EQ(cpt.context_parallel, ContextParallelKind::kAllGather);
  EXPECT_EQ(cpt.runtime, as_run_by_cpt_executor({}).runtime);
  const CostModelOptions deepspeed = for_runtime({}, Runtime::kDeepSpeed);
  EXPECT_FALSE(deepspeed.fp32_main_grads);  // the ZeRO paper's 16 bytes per parameter
  EXPECT_EQ(deepspeed.bucket_elements, 500'000'000);
  const CostModelOptions fsdp = for_runtime({}, Runtime::kFsdp);
  const CostModelOptions titan = for_runtime({}, Runtime::kTorchtitan);
  EXPECT_FALSE(fsdp.fp32_main_grads);
  EXPECT_LT(fsdp.attention_kernel_scale, 1.0);
  EXPECT_EQ(titan.attention_kernel_scale, 1.0);  // SDPA's FlashAttention, the reference kernel
  EXPECT_GT(fsdp.memory_traffic_scale, 1.0);
  EXPECT_EQ(titan.memory_traffic_scale, fsdp.memory_traffic_scale);
  EXPECT_LT(fsdp.fp8_gemm_scale, 1.0);
}

// The scales reach the prices: on one GPU the same step is slower under fsdp than under megatron,
// by more at a long sequence (its attention kernel) than at a short one.
TEST(RuntimeProfile, FsdpKernelsSlowTheStepMostWhereAttentionDominates) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  auto step = [&](Runtime runtime, int seq_len) {
    const spec::ParallelConfig p{
        .dp = 8, .micro_batch = 1, .global_batch = 8, .zero_stage = 3, .recompute = spec::Recompute::kFull};
    const Evaluation e = evaluate(model, cluster, p, seq_len, for_runtime({}, runtime));
    EXPECT_TRUE(std::holds_alternative<Estimate>(e)) << std::get<Infeasible>(e).detail;
    return std::get<Estimate>(e).time.total().value();
  };
  const double short_ratio = step(Runtime::kFsdp, 1024) / step(Runtime::kMegatron, 1024);
  const double long_ratio = step(Runtime::kFsdp, 8192) / step(Runtime::kMegatron, 8192);
  EXPECT_GT(short_ratio, 1.0);
  EXPECT_GT(long_ratio, short_ratio);
}

// FP8 GEMMs under the PyTorch runtimes run at fp8_gemm_scale of the curve; BF16 ones do not.
TEST(RuntimeProfile, Fp8ScaleAppliesToFp8GemmsOnly) {
  const auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions fsdp = for_runtime({}, Runtime::kFsdp);
  const CostModelOptions megatron;
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(1e11, 4096, h100, fsdp), gemm_efficiency_at(1e11, 4096, h100, megatron));
  fsdp.precision = spec::Precision::kFp8;
  CostModelOptions megatron_fp8 = megatron;
  megatron_fp8.precision = spec::Precision::kFp8;
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(1e11, 4096, h100, fsdp),
                   gemm_efficiency_at(1e11, 4096, h100, megatron_fp8) * fsdp.fp8_gemm_scale);
}

}  // namespace
}  // namespace cpt::cost
