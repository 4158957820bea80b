#include "costmodel/step_inventory.h"

#include <gtest/gtest.h>

#include "costmodel/collective_model.h"
#include "costmodel/step_estimator.h"
#include "costmodel/topology.h"
#include "costmodel/work_pricing.h"
#include "spec/executor_support.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/rank_layout.h"

namespace cpt::cost {
namespace {

const spec::ModelSpec& tiny() {
  static const spec::ModelSpec model = spec::find_catalog_model("tiny")->spec;
  return model;
}

CostModelOptions executor() {
  return as_run_by_cpt_executor(CostModelOptions{});
}

// Σ calls × times over the entries of `group` on a rank holding everything.
double calls_of(const StepInventory& inventory, CommGroup group, const RankShare& share, double microbatches) {
  double calls = 0;
  for (const WorkItem& item : inventory.items()) {
    if (item.group == group) calls += item.calls * times_per_step(item.scope, share, microbatches, inventory);
  }
  return calls;
}

// Tensor and sequence parallelism on cpt's executor, counted from its code
// (executor/parallel/tensor_parallel.cpp): per layer and microbatch, forward two reduce-scatter
// and all-gather pairs, backward two pairs and the two norms' gradients; the embedding's
// reduce-scatter forward and all-gather backward; the head's all-gather forward and the loss's
// two all-reduces; its reduce-scatter and the final norm's gradient backward.
TEST(StepInventory, TensorAndSequenceParallelCallsAreTheExecutors) {
  const spec::ParallelConfig p{.tp = 2, .micro_batch = 2, .global_batch = 8, .sequence_parallel = true};
  const StepInventory inventory = microbatch_work(tiny(), p, 128, 1, executor());
  const RankShare share{.layers = 2, .first = true, .last = true};
  const double microbatches = p.grad_accum();
  const double per_microbatch = 2 * (4 + 4 + 2) + (1 + 1) + (1 + 2 + 1 + 1);
  EXPECT_DOUBLE_EQ(calls_of(inventory, CommGroup::kTp, share, microbatches), per_microbatch * microbatches);
  EXPECT_EQ(calls_of(inventory, CommGroup::kCp, share, microbatches), 0);
  EXPECT_EQ(calls_of(inventory, CommGroup::kPp, share, microbatches), 0);
  // Megatron reduces the loss in three all-reduces and sums the norms' gradients once per step.
  const StepInventory megatron = microbatch_work(tiny(), p, 128, 1, CostModelOptions{});
  EXPECT_DOUBLE_EQ(calls_of(megatron, CommGroup::kTp, share, microbatches), (2 * 8 + 2 + 5) * microbatches);
}

// Every entry of every layout is real work: bytes to move, calls to start, a group of more than
// one rank; and a layout without an axis has no entry on it.
TEST(StepInventory, EntriesOnlyForTheAxesALayoutHas) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 16, "--gpu");
  const Topology topology(cluster);
  for (const CostModelOptions& options : {CostModelOptions{}, executor()}) {
    for (const spec::ParallelConfig& p : {spec::ParallelConfig{.dp = 16, .micro_batch = 1, .global_batch = 32},
                                          spec::ParallelConfig{.tp = 2,
                                          .cp = 2,
                                          .dp = 2,
                                          .pp = 2,
                                          .micro_batch = 1,
                                          .global_batch = 8,
                                          .zero_stage = 1,
                                          .sequence_parallel = true},
                                          spec::ParallelConfig{.tp = 2,
                                          .dp = 8,
                                          .micro_batch = 1,
                                          .global_batch = 16,
                                          .zero_stage = 3,
                                          .hybrid_shard = true,
                                          .recompute = spec::Recompute::kFull}}) {
      const spec::RankLayout layout(p, cluster.node.gpus_per_node);
      const LayoutCosts& costs = topology.layout_costs(layout);
      const GroupPlacements groups(costs, p);
      StepInventory inventory = microbatch_work(tiny(), p, 128, costs.shard_group, options);
      const RankShare share{.layers = 1, .first = true, .last = p.pp == 1, .params = 1e6, .transfers_per_pass = 1};
      add_step_end_work(inventory, tiny(), p,
                        {costs.shard_group, groups.of(CommGroup::kShard).size, groups.of(CommGroup::kReplicate).size},
                        share, options);
      const std::array<int, 6> sizes = {p.tp,
                                        p.cp,
                                        groups.of(CommGroup::kReplicas).size,
                                        groups.of(CommGroup::kShard).size,
                                        groups.of(CommGroup::kReplicate).size,
                                        p.pp};
      for (const WorkItem& item : inventory.items()) {
        const int size = sizes[static_cast<std::size_t>(item.group)];
        EXPECT_GT(size, 1) << "group " << static_cast<int>(item.group) << " in tp" << p.tp << " dp" << p.dp;
        EXPECT_GT(item.bytes.value(), 0);
        EXPECT_GT(item.calls, 0);
        EXPECT_GT(item.operations, 0);
      }
    }
  }
}

// price(): α–β per operation, one collective_overhead per overhead counted, and the straggler's
// wait only on an entry that waits and only under jitter.
TEST(StepInventory, PriceIsAlphaBetaPlusOverheads) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  const Topology topology(cluster);
  const spec::ParallelConfig p{.tp = 8, .micro_batch = 1, .global_batch = 8};
  const LayoutCosts& costs = topology.layout_costs(spec::RankLayout(p, cluster.node.gpus_per_node));
  const GroupPlacements groups(costs, p);
  CostModelOptions options;
  const PricingContext context = pricing_context(groups, cluster, options);
  WorkItem item{.pass = WorkPass::kForward,
                .scope = WorkScope::kLayer,
                .group = CommGroup::kTp,
                .kind = WorkKind::kAllReduce,
                .exposure = Exposure::kBlocking,
                .bytes = core::Bytes(1 << 24),
                .operations = 3,
                .call_overheads = 5,
                .calls = 3,
                .kernels = 0,
                .waits_for_slowest = false,
                .resumes = false};
  const double all_reduce =
      collective_time(Collective::kAllReduce, item.bytes, groups.of(CommGroup::kTp), 0.85).value();
  EXPECT_NEAR(price(item, context, core::Seconds(1e-3)).value(), 3 * all_reduce + 5 * 100e-6, 1e-12);
  item.waits_for_slowest = true;
  EXPECT_NEAR(price(item, context, core::Seconds(1e-3)).value(), 3 * all_reduce + 5 * 100e-6, 1e-12);
  options.compute_jitter_sqrt_s = 1e-3;
  EXPECT_GT(price(item, pricing_context(groups, cluster, options), core::Seconds(1e-3)).value(),
            3 * all_reduce + 5 * 100e-6);
}

// The estimate's counts are the inventory's folds: the executor's data-parallel calls of a ZeRO-1
// step are its buckets reduce-scattered and gathered once, plus its scalars.
TEST(StepInventory, EstimateCountsAreFoldsOfTheInventory) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 2, "--gpu");
  const spec::ParallelConfig p{.dp = 2, .micro_batch = 1, .global_batch = 8, .zero_stage = 1};
  const CostModelOptions options = executor();
  const auto estimate = std::get<Estimate>(evaluate(tiny(), cluster, p, 128, options));
  const Topology topology(cluster);
  const LayoutCosts& costs = topology.layout_costs(spec::RankLayout(p, cluster.node.gpus_per_node));
  const GroupPlacements groups(costs, p);
  StepInventory inventory = microbatch_work(tiny(), p, 128, costs.shard_group, options);
  const RankShare share{
      .layers = 2, .first = true, .last = true, .params = static_cast<double>(tiny().param_counts().total)};
  add_step_end_work(inventory, tiny(), p,
                    {costs.shard_group, groups.of(CommGroup::kShard).size, groups.of(CommGroup::kReplicate).size},
                    share, options);
  const auto scalars = spec::executor_step_scalar_all_reduces(p, costs.shard_group);
  EXPECT_GE(inventory.gradient_buckets, 1);
  EXPECT_EQ(inventory.gradient_reductions, 1);
  EXPECT_DOUBLE_EQ(estimate.calls_per_step.dp, 2 * inventory.gradient_buckets + scalars.replicas + scalars.shard);
  EXPECT_DOUBLE_EQ(estimate.calls_per_step.dp, calls_of(inventory, CommGroup::kReplicas, share, p.grad_accum()) +
                                                   calls_of(inventory, CommGroup::kShard, share, p.grad_accum()));
}

// Every producer at once — tp with sp, cp, pp, ZeRO-3 with hybrid sharding, full recomputation,
// a teacher, ep and etp on an MoE — fits the inventory's fixed capacity, on both runtimes and both
// context-parallel forms.
TEST(StepInventory, EveryParallelismAtOnceFitsTheInventory) {
  const auto moe = spec::find_catalog_model("qwen3-30b-a3b")->spec;
  const spec::ParallelConfig p{.tp = 2,
                               .cp = 2,
                               .dp = 4,
                               .pp = 2,
                               .micro_batch = 1,
                               .global_batch = 16,
                               .zero_stage = 3,
                               .hybrid_shard = true,
                               .recompute = spec::Recompute::kFull,
                               .sequence_parallel = true,
                               .ep = 4,
                               .etp = 2};
  for (CostModelOptions options : {CostModelOptions{}, executor()}) {
    options.distill_teacher = true;
    for (const auto kind : {ContextParallelKind::kRing, ContextParallelKind::kAllGather}) {
      options.context_parallel = kind;
      StepInventory inventory = microbatch_work(moe, p, 4096, 8, options);
      const RankShare share{
          .layers = 24, .first = true, .last = true, .params = 1e9, .expert_params = 5e8, .transfers_per_pass = 1};
      add_step_end_work(inventory, moe, p, {8, 8, 2}, share, options);
      EXPECT_GT(inventory.items().size(), 30u);
      EXPECT_LE(inventory.items().size(), static_cast<std::size_t>(kMaxWorkItems));
    }
  }
}

}  // namespace
}  // namespace cpt::cost
