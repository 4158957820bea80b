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
  const spec::ParallelConfig p{.tp = 8,
                               .pp = 8,
                               .virtual_stages = 3,
                               .micro_batch = 1,
                               .global_batch = 64,
                               .recompute = spec::Recompute::kSelective,
                               .sequence_parallel = true,
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
  EXPECT_DOUBLE_EQ(gemm_time(312e12, 4096, a100, o).value(), 1.0 / 0.9);  // 312 TFLOP, beyond the last point
  EXPECT_DOUBLE_EQ(gemm_time(1e9, 4096, a100, o).value(), 1e9 / (312e12 * 0.5));
  EXPECT_NEAR(o.gemm_efficiency.at(10e9), 0.7, 1e-12);  // halfway in log10 between 1 and 100 GFLOP
  EXPECT_DOUBLE_EQ(o.gemm_efficiency.at(1e6), 0.5);
}

TEST(LayerCosts, AProfileCurveForThePrecisionWins) {
  auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  for (auto& curve : h100.gemm_efficiency) curve.clear();
  CostModelOptions o;
  const double before = gemm_time(989.4e12, 4096, h100, o).value();
  h100.gemm_efficiency[static_cast<std::size_t>(spec::Precision::kBf16)] = {{1.0, 0.25}, {1000.0, 0.5}};
  EXPECT_DOUBLE_EQ(gemm_time(989.4e12, 4096, h100, o).value(), 2.0);  // 989.4 TFLOP at half the peak
  EXPECT_NE(before, 2.0);
  o.precision = spec::Precision::kFp8;  // no fp8 curve in the profile: the default applies
  EXPECT_DOUBLE_EQ(gemm_time(1978.9e12, 4096, h100, o).value(), 1.0 / o.gemm_efficiency.at(1978.9e12));
}

// A profile with curves by smallest dimension prices a skinny GEMM below a square one of the same
// FLOPs: each curve at its own min_dim, log-interpolated between them, held beyond the ends; the
// curve by size alone no longer applies.
TEST(LayerCosts, CurvesBySmallestDimensionPriceSkinnyGemms) {
  auto gpu = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  for (auto& curve : gpu.gemm_efficiency) curve.clear();
  CostModelOptions o;
  o.precision = spec::Precision::kBf16;
  auto& shaped = gpu.gemm_efficiency_by_min_dim[static_cast<std::size_t>(spec::Precision::kBf16)];
  shaped = {{32, {{1.0, 0.2}, {100.0, 0.4}}}, {512, {{1.0, 0.6}, {100.0, 0.8}}}};
  gpu.gemm_efficiency[static_cast<std::size_t>(spec::Precision::kBf16)] = {{1.0, 0.01}};  // not used
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(10e9, 32, gpu, o), 0.3);                            // halfway in log(GFLOP)
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(10e9, 16, gpu, o), 0.3);                            // held below the first
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(10e9, 4096, gpu, o), 0.7);                          // held above the last
  EXPECT_NEAR(gemm_efficiency_at(10e9, 128, gpu, o), 0.3 + 0.5 * 0.4, 1e-12);             // halfway in log(min_dim)
  EXPECT_DOUBLE_EQ(gemm_time(10e9, 512, gpu, o).value(), 10e9 / (989.4e12 * 0.7));
  o.precision = spec::Precision::kFp8;  // no curves for fp8: the default curve by size
  EXPECT_DOUBLE_EQ(gemm_efficiency_at(10e9, 32, gpu, o), o.gemm_efficiency.at(10e9));
}

// A profile that measured the cross-entropy (a CPU's) prices the loss by its logits: forward
// T·V/tp logits at the forward rate, backward at the backward rate, the norm's traffic unchanged.
TEST(LayerCosts, MeasuredCrossEntropyRatesPriceTheLoss) {
  const spec::ModelSpec m = spec::find_catalog_model("tiny")->spec;
  auto gpu = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  const spec::ParallelConfig p{.tp = 2, .micro_batch = 2};
  CostModelOptions o;
  const auto before = head_costs(m, p, 64, gpu, o);
  gpu.cross_entropy_rates = {{1.0, 1e6, 5e5}};  // one point: the same rates at every size
  const auto after = head_costs(m, p, 64, gpu, o);
  const double logits = 2.0 * 64 * static_cast<double>(m.tp_padded_vocab(2)) / 2;
  const double norm_fwd = 2.0 * 2 * 64 * m.hidden * 2 / (gpu.hbm_bandwidth.value() * o.hbm_efficiency);
  EXPECT_NEAR(after.head_forward.memory.value(), logits / 1e6 + norm_fwd, 1e-12);
  EXPECT_NEAR(after.head_backward.memory.value(), logits / 5e5 + 2 * norm_fwd, 1e-12);
  EXPECT_EQ(after.head_forward.gemm, before.head_forward.gemm);
}

// Rates measured at several sizes are interpolated in log(logits) and held beyond the ends.
TEST(LayerCosts, CrossEntropyRatesFollowTheLossSize) {
  auto gpu = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  EXPECT_FALSE(cross_entropy_rates_at(gpu, 1e6).has_value());  // priced as memory traffic
  gpu.cross_entropy_rates = {{1.0, 3e8, 1e8}};
  EXPECT_EQ(cross_entropy_rates_at(gpu, 1e6)->forward_logits_per_s, 3e8);
  gpu.cross_entropy_rates = {{1e6, 1e9, 5e8}, {4e6, 2.5e8, 1e8}};
  const auto mid = cross_entropy_rates_at(gpu, 2e6);  // halfway in log(logits)
  EXPECT_DOUBLE_EQ(mid->forward_logits_per_s, 6.25e8);
  EXPECT_DOUBLE_EQ(mid->backward_logits_per_s, 3e8);
  EXPECT_EQ(cross_entropy_rates_at(gpu, 1e5)->forward_logits_per_s, 1e9);
  EXPECT_EQ(cross_entropy_rates_at(gpu, 1e8)->backward_logits_per_s, 1e8);
  // The head's loss at tiny's size (micro-batch 2 x 64 tokens x 512 logits = 65,536: below the
  // curve) takes the small size's rates.
  const spec::ModelSpec m = spec::find_catalog_model("tiny")->spec;
  const auto h = head_costs(m, spec::ParallelConfig{.micro_batch = 2}, 64, gpu, CostModelOptions{});
  const double logits = 2.0 * 64 * static_cast<double>(m.tp_padded_vocab(1));
  EXPECT_NEAR(h.loss_forward.value(), logits / 1e9, 1e-15);
  EXPECT_NEAR(h.loss_backward.value(), logits / 5e8, 1e-15);
}

// cpt's executor dispatches many more kernels than Megatron's fused ones; each costs
// kernel_overhead, and the step counts them (costmodel/kernel_dispatch.h).
TEST(LayerCosts, EagerDispatchCountsTheExecutorsKernels) {
  const spec::ModelSpec m = spec::find_catalog_model("tiny")->spec;
  const auto gpu = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions fused;
  const CostModelOptions eager = as_run_by_cpt_executor(fused);
  const spec::ParallelConfig single{.micro_batch = 2};
  const spec::ParallelConfig tp2{.tp = 2, .micro_batch = 2};
  const auto f = block_costs(m, single, 64, gpu, fused, LayerKind::kDense),
             e = block_costs(m, single, 64, gpu, eager, LayerKind::kDense);
  EXPECT_EQ(f.forward.kernels, 12);
  EXPECT_EQ(f.backward.kernels, 24);
  EXPECT_GT(e.forward.kernels, 4 * f.forward.kernels);
  EXPECT_DOUBLE_EQ(e.forward.overhead.value(), e.forward.kernels * eager.kernel_overhead.value());
  // The layer's own kernels do not depend on the layout (the calls' are the step inventory's).
  EXPECT_EQ(block_costs(m, tp2, 64, gpu, eager, LayerKind::kDense).forward.kernels, e.forward.kernels);
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 1, "--gpu");
  const spec::ParallelConfig step{.micro_batch = 2, .global_batch = 8};
  const auto est = std::get<Estimate>(evaluate(m, cluster, step, 64, eager));
  const auto hc = head_costs(m, step, 64, gpu, eager);
  const double per_microbatch = m.layers * (e.forward.kernels + e.backward.kernels) + hc.embedding_forward.kernels +
                                hc.embedding_backward.kernels + hc.head_forward.kernels + hc.head_backward.kernels;
  EXPECT_GT(est.kernels_per_step, 4 * per_microbatch);  // 4 microbatches and the optimizer step's kernels
  EXPECT_LT(est.kernels_per_step, 4 * per_microbatch + 200);
}

// FP8 recipes speed up the linear layers, not the attention core (Transformer Engine's default).
TEST(LayerCosts, Fp8LeavesTheAttentionCoreInBf16) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions bf16, fp8;
  fp8.precision = spec::Precision::kFp8;
  const spec::ParallelConfig p{.micro_batch = 1};
  const auto a = block_costs(m, p, 8192, h100, bf16, LayerKind::kDense);
  const auto b = block_costs(m, p, 8192, h100, fp8, LayerKind::kDense);
  EXPECT_EQ(a.forward.attention, b.forward.attention);
  EXPECT_EQ(a.backward.attention, b.backward.attention);
  EXPECT_LT(b.forward.gemm, a.forward.gemm);
}

TEST(LayerCosts, FlashAttentionHalvesCausalWork) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const auto h100 = spec::HardwareCatalog::builtin().gpu("h100", "--gpu");
  CostModelOptions flash;
  CostModelOptions plain;
  plain.flash_attention = false;
  const spec::ParallelConfig p{.tp = 1, .micro_batch = 1};
  const auto a = block_costs(m, p, 8192, h100, flash, LayerKind::kDense);
  const auto b = block_costs(m, p, 8192, h100, plain, LayerKind::kDense);
  EXPECT_EQ(a.model_flops, b.model_flops);              // the FLOP convention does not change
  EXPECT_LT(a.forward.attention, b.forward.attention);  // the work and its time do
  EXPECT_LT(a.backward.attention, b.backward.attention);
}

}  // namespace
}  // namespace cpt::cost
