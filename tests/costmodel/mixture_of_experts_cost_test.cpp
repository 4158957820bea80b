// Mixtures of experts priced: the routed experts' model state over ep·etp and expert-dp (by hand),
// their FLOPs independent of how they are split, the all-to-all only where tokens leave the rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "costmodel/layer_costs.h"
#include "costmodel/memory_model.h"
#include "costmodel/step_estimator.h"
#include "costmodel/step_inventory.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/rank_layout.h"
#include "spec/stage_partition.h"

namespace cpt::cost {
namespace {

const spec::ModelSpec& mixtral() {
  static const spec::ModelSpec m = spec::find_catalog_model("mixtral-8x7b")->spec;
  return m;
}

spec::ParallelConfig expert_parallel(int dp, int ep, int zero_stage) {
  spec::ParallelConfig p;
  p.dp = dp;
  p.ep = ep;
  p.micro_batch = 1;
  p.global_batch = dp;
  p.zero_stage = zero_stage;
  return p;
}

MemoryBreakdown memory_of(const spec::ParallelConfig& p, const CostModelOptions& o = {}) {
  const auto stages = spec::StagePartition::balanced(mixtral().layers, p.pp, p.virtual_stages);
  return memory_per_pp_rank(mixtral(), p, 4096, stages, nullptr, spec::RankLayout(p, 8), o).front();
}

Estimate estimate(const spec::ModelSpec& model, const spec::ParallelConfig& p, int gpus) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", gpus, "--gpu");
  const Evaluation e = evaluate(model, cluster, p, 128, CostModelOptions{});
  if (const auto* infeasible = std::get_if<Infeasible>(&e)) ADD_FAILURE() << infeasible->detail;
  return std::get<Estimate>(e);
}

// Mixtral 8x7B on 8 GPUs, ep 8 (one expert each), ZeRO-1: the dense part (attention, norms, router,
// embedding, head) replicated with its optimizer state over dp 8; each rank's expert whole, with
// its optimizer state over expert-dp = 8 / 8 = 1. Megatron's fp32 main gradients.
TEST(MixtureOfExpertsCost, ModelStateOfExpertsByHand) {
  const double layers = 32;
  const double dense = layers * (41'943'040.0 + 2 * 4096 + 4096 * 8) + 2 * 32000.0 * 4096 + 4096;
  const double experts = layers * 3.0 * 4096 * 14336;  // 8 experts / ep 8
  const auto memory = memory_of(expert_parallel(8, 8, 1));
  EXPECT_NEAR(static_cast<double>(memory.weights.value()), 2 * dense + 2 * experts, 4);
  EXPECT_NEAR(static_cast<double>(memory.grads.value()), 4 * dense + 4 * experts, 4);
  EXPECT_NEAR(static_cast<double>(memory.optimizer.value()), 12 * dense / 8 + 12 * experts, 4);
  // ep 2 over the same 8 GPUs: four experts a rank, their state over expert-dp 4.
  const auto ep2 = memory_of(expert_parallel(8, 2, 1));
  EXPECT_NEAR(static_cast<double>(ep2.optimizer.value()), 12 * dense / 8 + 12 * 4 * experts / 4, 4);
  EXPECT_NEAR(static_cast<double>(ep2.weights.value()), 2 * dense + 2 * 4 * experts, 4);
  // ZeRO-3 over 64 GPUs with EWC: its Fisher and anchor shard like the weights, the dense part over
  // the 64 replicas, the experts over expert-dp 64 / 8.
  CostModelOptions ewc;
  ewc.ewc = true;
  const auto zero3 = memory_of(expert_parallel(64, 8, 3), ewc);
  EXPECT_NEAR(static_cast<double>(zero3.ewc.value()), 8 * (dense / 64 + experts / 8), 4);
  // Experts unsharded (expert-dp 1): no gathered copies beside them.
  const auto unsharded = memory_of(expert_parallel(8, 8, 3));
  EXPECT_NEAR(
      static_cast<double>(unsharded.weights.value()),
      2 * dense / 8 + 2 * experts + 2 * (2 * 32000.0 * 4096 + 4096) + 2 * 2 * (41'943'040.0 + 2 * 4096 + 4096 * 8), 4);
}

// Megatron-Core's MoE layer has no tensor-parallel MLP to reduce unless it has shared experts:
// Mixtral without them calls tp once per layer and pass (a sequence-parallel pair), with them twice.
TEST(MixtureOfExpertsCost, TensorParallelSkipsRoutedMlps) {
  spec::ParallelConfig p = expert_parallel(32, 8, 1);
  p.tp = 2;
  p.sequence_parallel = true;
  spec::ModelSpec shared = mixtral();
  shared.moe.shared_ffn_hidden = 14336;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h200", 64, "--gpu");
  auto tp_calls = [&](const spec::ModelSpec& m) {
    const Evaluation e = evaluate(m, cluster, p, 4096, CostModelOptions{});
    if (const auto* infeasible = std::get_if<Infeasible>(&e)) ADD_FAILURE() << infeasible->detail;
    return std::get<Estimate>(e).calls_per_step.tp;
  };
  // 32 layers, one microbatch, forward and backward, one more pair (2 calls) each.
  EXPECT_EQ(tp_calls(shared) - tp_calls(mixtral()), 32 * 2 * 2);
}

// Latent attention's down projections stay whole on every tensor-parallel rank.
TEST(MixtureOfExpertsCost, LatentDownProjectionsAreReplicatedOverTp) {
  const auto counts = spec::find_catalog_model("deepseek-v3")->spec.param_counts();
  const double replicated = 7168.0 * 1536 + 1536 + 7168.0 * (512 + 64) + 512;
  const double split_mlp = (counts.moe_layers * static_cast<double>(counts.shared_experts_per_layer) +
                            counts.dense_layers * static_cast<double>(counts.mlp_per_layer)) /
                           61;
  EXPECT_NEAR(block_params_per_tp(counts, 1) - block_params_per_tp(counts, 2),
              (static_cast<double>(counts.attention_per_layer) - replicated + split_mlp) / 2, 1e-3);
}

// 6·(T/tp)·k·h·f_e per rank whatever the split: ep and etp change the GEMMs' shapes, not the work.
TEST(MixtureOfExpertsCost, RoutedFlopsDoNotDependOnTheSplit) {
  const auto gpu = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu").gpu();
  const double reference =
      block_costs(mixtral(), expert_parallel(8, 1, 1), 4096, gpu, {}, LayerKind::kMoe).model_flops.value();
  for (const auto& [ep, etp] : {std::pair{2, 1}, {8, 1}, {4, 2}}) {
    spec::ParallelConfig p = expert_parallel(8, ep, 1);
    p.etp = etp;
    EXPECT_DOUBLE_EQ(block_costs(mixtral(), p, 4096, gpu, {}, LayerKind::kMoe).model_flops.value(), reference)
        << ep << " " << etp;
  }
  // Active, not total: two of eight experts per token (attention core aside).
  const double routed = 6.0 * 4096 * 2 * 4096 * 14336 * 3;
  EXPECT_GT(reference, routed);
  EXPECT_LT(reference, 2 * routed);
}

// Tokens cross ranks only with ep > 1: an all-to-all each way per MoE layer and pass, after the
// forward's all-gather of the pairs per expert.
// Routed experts that reduce over expert-dp talk in a communicator of their own, with its NCCL
// buffers: Mixtral on dp 8 with ep 4 (expert-dp 2) holds one more group's than with ep 8 (expert-dp
// 1); the activations are the same, so "other" differs by the buffers and their fragmentation.
TEST(MixtureOfExpertsCost, ExpertDataParallelGroupHoldsItsBuffers) {
  const CostModelOptions o;
  const MemoryBreakdown one = memory_of(expert_parallel(8, 8, 1));
  const MemoryBreakdown two = memory_of(expert_parallel(8, 4, 1));
  EXPECT_EQ(one.activations.value(), two.activations.value());
  EXPECT_NEAR(static_cast<double>(two.other.value() - one.other.value()),
              static_cast<double>(o.comm_buffer_per_group.value()) * (1 + o.fragmentation), 2.0);
}

TEST(MixtureOfExpertsCost, AllToAllOnlyWithExpertParallelism) {
  const auto tiny = spec::find_catalog_model("tiny-moe")->spec;  // 2 MoE layers, 4 experts
  const Estimate local = estimate(tiny, expert_parallel(8, 1, 1), 8);
  const Estimate spread = estimate(tiny, expert_parallel(8, 4, 1), 8);
  EXPECT_EQ(local.time.ep_comm.value(), 0.0);
  EXPECT_EQ(local.calls_per_step.ep, 0.0);
  EXPECT_GT(spread.time.ep_comm.value(), 0.0);
  // 2 MoE layers: forward counts + dispatch + combine, backward dispatch + combine.
  EXPECT_EQ(spread.calls_per_step.ep, 2 * (3 + 2));
}

// Dense layers among MoE layers (DeepSeek's first_k_dense_replace) are priced as themselves on the
// stages that hold them: Mixtral with its first two layers dense changes the first pipeline stage
// alone (its time, its parameters: two dense MLPs in place of two routers and their experts, by
// hand), and the first rank's expert calls are those of its own MoE layers.
TEST(MixtureOfExpertsCost, EachStagePricesItsOwnLayers) {
  spec::ModelSpec dense_first = mixtral();
  dense_first.moe.first_dense_layers = 2;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 32, "--gpu");
  spec::ParallelConfig p = expert_parallel(8, 8, 1);
  p.pp = 4;
  p.global_batch = 64;
  const auto all_moe = std::get<Estimate>(evaluate(mixtral(), cluster, p, 4096));
  const auto mixed = std::get<Estimate>(evaluate(dense_first, cluster, p, 4096));
  ASSERT_EQ(mixed.stages.forward_s.size(), 4u);
  EXPECT_LT(mixed.stages.forward_s[0], all_moe.stages.forward_s[0]);  // two dense MLPs: one token's FLOPs
  EXPECT_LT(mixed.stages.backward_s[0], all_moe.stages.backward_s[0]);
  for (std::size_t s = 1; s < 4; ++s) {
    EXPECT_EQ(mixed.stages.forward_s[s], all_moe.stages.forward_s[s]) << "stage " << s;
    EXPECT_EQ(mixed.stages.backward_s[s], all_moe.stages.backward_s[s]) << "stage " << s;
  }
  // Per layer, by hand (h 4096, f 14336, 8 experts over ep 8): a dense MLP 3·h·f; an MoE layer's
  // router h·E and its one expert per rank 3·h·f.
  const double h = 4096, f = 14336;
  const double dense_mlp = 3 * h * f, moe_mlp = h * 8 + 3 * h * f * 8 / 8;
  const auto stages = spec::StagePartition::balanced(32, 4, 1);
  EXPECT_DOUBLE_EQ(params_of_pp_rank(dense_first, p, stages, 0) - params_of_pp_rank(mixtral(), p, stages, 0),
                   2 * (dense_mlp - moe_mlp));
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(params_of_pp_rank(dense_first, p, stages, r), params_of_pp_rank(mixtral(), p, stages, r)) << r;
  }
  // The critical rank (the first, finishing last) runs the expert calls of its own 6 MoE layers:
  // per microbatch the counts, dispatch and combine forward, dispatch and combine backward.
  ASSERT_EQ(mixed.critical_pp_rank, 0);
  ASSERT_EQ(all_moe.critical_pp_rank, 0);
  EXPECT_EQ(all_moe.calls_per_step.ep, 8 * p.grad_accum() * (3 + 2));
  EXPECT_EQ(mixed.calls_per_step.ep, 6 * p.grad_accum() * (3 + 2));
}

// cpt's executor routes an MoE layer's sequence shards (executor/model/moe_routing.h) by gathering
// each rank's pairs per (sequence, run, expert) and probability sums, fp64 [B·R + 1, E], over tp
// and then over cp, every forward of every MoE layer; the tp gather holds sp ranks' rows, the cp
// gather sp·cp ranks'. A cp rank holds two runs of each sequence (R 2) unless an even sp cuts its
// chunks whole (R 1). Megatron's inventory has none of these.
TEST(MixtureOfExpertsCost, ExecutorGathersTheRoutingOverTpThenCp) {
  const auto tiny = spec::find_catalog_model("tiny-moe")->spec;  // 2 MoE layers, 4 experts
  const std::int64_t experts = tiny.moe.experts;
  const auto gathers = [&](const spec::ParallelConfig& p, const CostModelOptions& o) {
    std::vector<std::pair<CommGroup, std::int64_t>> found;
    for (const WorkItem& item : microbatch_work(tiny, p, 64, 1, o).items()) {
      if (item.pass == WorkPass::kForward && item.scope == WorkScope::kMoeLayer && item.kind == WorkKind::kAllGather &&
          (item.group == CommGroup::kTp || item.group == CommGroup::kCp)) {
        found.emplace_back(item.group, item.bytes.value());
      }
    }
    return found;
  };
  const auto executor = as_run_by_cpt_executor(CostModelOptions{});
  using Found = std::vector<std::pair<CommGroup, std::int64_t>>;
  // cp 2 alone: R 2, B 2 -> 5 rows of E fp64 from each of the 2 cp ranks; the routing gather
  // is the cp group's second all-gather beside the keys' and values'.
  const spec::ParallelConfig cp2{.cp = 2, .micro_batch = 2, .global_batch = 8, .ep = 2};
  const Found cp_only = gathers(cp2, executor);
  EXPECT_NE(std::find(cp_only.begin(), cp_only.end(), std::pair{CommGroup::kCp, 5 * experts * 8 * 2}), cp_only.end());
  // tp 2 with sequence parallelism and cp 2: R 1 -> 3 rows, over tp from 2 ranks, then over cp from 4.
  const spec::ParallelConfig tp2_cp2{
      .tp = 2, .cp = 2, .micro_batch = 2, .global_batch = 8, .sequence_parallel = true, .ep = 2};
  const Found both = gathers(tp2_cp2, executor);
  EXPECT_NE(std::find(both.begin(), both.end(), std::pair{CommGroup::kTp, 3 * experts * 8 * 2}), both.end());
  EXPECT_NE(std::find(both.begin(), both.end(), std::pair{CommGroup::kCp, 3 * experts * 8 * 4}), both.end());
  // Megatron-LM's MoE layer gathers no routing rows.
  const Found megatron = gathers(tp2_cp2, CostModelOptions{});
  EXPECT_EQ(std::find(megatron.begin(), megatron.end(), std::pair{CommGroup::kCp, 3 * experts * 8 * 4}),
            megatron.end());
}

}  // namespace
}  // namespace cpt::cost
