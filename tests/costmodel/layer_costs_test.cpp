#include "costmodel/layer_costs.h"

#include <gtest/gtest.h>

#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::cost {
namespace {

// Model FLOPs per iteration = Korthikanti et al. 2022 eq. (7):
// 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)), for a GPT model (bias FLOPs are not counted by either).
TEST(LayerCosts, ModelFlopsMatchKorthikantiEquationSeven) {
  const spec::ModelSpec m = spec::find_catalog_model("megatron-175b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("a100", 64, "--gpu");
  const spec::ParallelConfig p{.tp = 8, .pp = 8, .virtual_stages = 3, .micro_batch = 1, .global_batch = 64,
                               .recompute = spec::Recompute::kSelective, .sequence_parallel = true,
                               .schedule = spec::ScheduleKind::kInterleaved1F1B};
  CostModelOptions o;
  o.flash_attention = false;
  const auto ev = evaluate(m, cluster, p, 2048, o);
  ASSERT_TRUE(std::holds_alternative<Estimate>(ev)) << std::get<Infeasible>(ev).detail;
  const double B = 64, L = 96, s = 2048, h = 12288, V = 51200;
  const double eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  EXPECT_NEAR(std::get<Estimate>(ev).model_flops_per_step.value() / eq7, 1.0, 1e-12);
}

// One forward GEMM time is FLOPs over peak times the curve's efficiency at that size.
TEST(LayerCosts, GemmTimeUsesTheEfficiencyCurve) {
  const auto a100 = spec::HardwareCatalog::builtin().gpu("a100", "--gpu");
  CostModelOptions o;
  o.gemm_efficiency = EfficiencyCurve{{{1.0, 0.5}, {100.0, 0.9}}};
  EXPECT_DOUBLE_EQ(gemm_time(312e12, a100, o).value(), 1.0 / 0.9);  // 312 TFLOP, beyond the last point
  EXPECT_DOUBLE_EQ(gemm_time(1e9, a100, o).value(), 1e9 / (312e12 * 0.5));
  EXPECT_NEAR(o.gemm_efficiency.at(10e9), 0.7, 1e-12);  // halfway in log10 between 1 and 100 GFLOP
  EXPECT_DOUBLE_EQ(o.gemm_efficiency.at(1e6), 0.5);
}

TEST(LayerCosts, AProfileCurveForThePrecisionWins) {
  auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions o;
  const double before = gemm_time(989.4e12, h100, o).value();
  h100.gemm_efficiency[static_cast<std::size_t>(spec::Precision::kBf16)] = {{1.0, 0.25}, {1000.0, 0.5}};
  EXPECT_DOUBLE_EQ(gemm_time(989.4e12, h100, o).value(), 2.0);  // 989.4 TFLOP at half the peak
  EXPECT_NE(before, 2.0);
  o.precision = spec::Precision::kFp8;  // no fp8 curve in the profile: the default applies
  EXPECT_DOUBLE_EQ(gemm_time(1978.9e12, h100, o).value(), 1.0 / o.gemm_efficiency.at(1978.9e12));
}

TEST(LayerCosts, FlashAttentionHalvesCausalWorkAndNoTensorParallelTrafficWithoutTp) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions flash;
  CostModelOptions plain;
  plain.flash_attention = false;
  const spec::ParallelConfig p{.tp = 1, .micro_batch = 1};
  const auto a = block_costs(m, p, 8192, h100, flash);
  const auto b = block_costs(m, p, 8192, h100, plain);
  EXPECT_EQ(a.model_flops, b.model_flops);                // the FLOP convention does not change
  EXPECT_LT(a.forward.attention, b.forward.attention);    // the work and its time do
  EXPECT_LT(a.backward.attention, b.backward.attention);
  EXPECT_EQ(a.tp_collectives_forward, 0);         // "off" case of the TP term
  EXPECT_EQ(a.cp_bytes_forward.value(), 0);       // "off" case of the CP term
}

}  // namespace
}  // namespace cpt::cost
