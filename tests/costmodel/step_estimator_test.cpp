#include "costmodel/step_estimator.h"

#include "costmodel/collective_model.h"
#include "costmodel/compute_sharing.h"
#include "costmodel/memory_model.h"
#include "costmodel/sim/step_simulator.h"
#include "costmodel/topology.h"
#include "spec/executor_support.h"
#include "spec/rank_layout.h"
#include "costmodel/straggler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::cost {
namespace {

const spec::HardwareCatalog& cat() {
  return spec::HardwareCatalog::builtin();
}

// The options as cpt's executor dispatches kernels (one per operator), otherwise the defaults.
CostModelOptions eager_dispatch() {
  CostModelOptions o;
  o.dispatch = KernelDispatch::kEager;
  return o;
}

Estimate expect_feasible(const Evaluation& ev) {
  if (const auto* inf = std::get_if<Infeasible>(&ev)) {
    ADD_FAILURE() << to_string(inf->reason) << ": " << inf->detail;
    return {};
  }
  return std::get<Estimate>(ev);
}

// The closed-form pipeline of a search agrees with the replayed schedule on real configurations.
TEST(StepEstimator, FastPipelineAgreesWithTheReplay) {
  const auto model = spec::find_catalog_model("llama3-70b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 256, "--gpu");
  int checked = 0;
  for (int pp : {2, 4, 8}) {
    for (int v : {1, 2}) {
      for (int gb : {64, 256}) {
        spec::ParallelConfig p{.tp = 8,
                               .dp = 256 / (8 * pp),
                               .pp = pp,
                               .virtual_stages = v,
                               .micro_batch = 1,
                               .global_batch = gb,
                               .zero_stage = 1,
                               .recompute = spec::Recompute::kSelective,
                               .sequence_parallel = true};
        p.schedule = v > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
        CostModelOptions exact;
        CostModelOptions fast;
        fast.exact_pipeline = false;
        const Estimate a = expect_feasible(evaluate(model, cluster, p, 8192, exact));
        const Estimate b = expect_feasible(evaluate(model, cluster, p, 8192, fast));
        EXPECT_NEAR(b.time.total() / a.time.total(), 1.0, 0.03) << "pp " << pp << " v " << v << " gb " << gb;
        EXPECT_NEAR(b.peak_memory().total() / a.peak_memory().total(), 1.0, 0.01);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12);
}

TEST(StepEstimator, OutOfMemoryIsAValueWithTheNumbers) {
  const auto model = spec::find_catalog_model("llama3-70b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const auto ev = evaluate(model, cluster, spec::ParallelConfig{.dp = 8, .global_batch = 8}, 4096);
  ASSERT_TRUE(std::holds_alternative<Infeasible>(ev));
  const auto& inf = std::get<Infeasible>(ev);
  EXPECT_EQ(inf.reason, InfeasibleReason::kOutOfMemory);
  EXPECT_NE(inf.detail.find(" GiB > 80.0 GiB on pp rank 0 (weights 131.4, grads 262.8, optimizer 788.5"),
            std::string::npos)
      << inf.detail;
}

TEST(StepEstimator, InvalidAndUnsupportedConfigurations) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const auto bad = evaluate(model, cluster, spec::ParallelConfig{.tp = 3}, 8192);
  EXPECT_EQ(std::get<Infeasible>(bad).reason, InfeasibleReason::kInvalidConfig);
  CostModelOptions no_flash;
  no_flash.flash_attention = false;
  const auto cp = evaluate(model, cluster, spec::ParallelConfig{.tp = 4, .cp = 2, .global_batch = 1}, 8192, no_flash);
  EXPECT_EQ(std::get<Infeasible>(cp).reason, InfeasibleReason::kUnsupportedCombination);
}

// Context parallelism as cpt's executor runs it (all-gather of K and V, reduce-scatter of their
// gradients, nothing hidden) against the ring: more exposed time, and the gathered K and V of the
// rest of the sequence in every layer's activations.
TEST(StepEstimator, ContextParallelAllGatherIsExposedAndKeepsTheGatheredKeys) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig p{.tp = 2, .cp = 4, .global_batch = 1, .recompute = spec::Recompute::kSelective};
  CostModelOptions ring;
  CostModelOptions gather;
  gather.context_parallel = ContextParallelKind::kAllGather;
  const Estimate a = expect_feasible(evaluate(model, cluster, p, 8192, ring));
  const Estimate b = expect_feasible(evaluate(model, cluster, p, 8192, gather));
  EXPECT_GT(b.time.cp_comm.value(), a.time.cp_comm.value());
  EXPECT_GT(b.time.cp_comm.value(), 0.0);
  // Per layer: K and V (g = 8 heads of 128 / tp 2) of the other 3/4 of the 8192 tokens, bf16.
  const double tokens = 8192.0 / 4;
  const double extra = 2 * 2 * tokens * (8 * 128 / 2.0) * 3;
  const double act_a = static_cast<double>(activation_bytes_per_layer(model, p, 8192, ring, LayerKind::kDense).value());
  const double act_b =
      static_cast<double>(activation_bytes_per_layer(model, p, 8192, gather, LayerKind::kDense).value());
  EXPECT_NEAR(act_b - act_a, extra, 2.0);
  // Without context parallelism the two are the same model.
  const spec::ParallelConfig q{
      .tp = 2, .dp = 4, .global_batch = 4, .zero_stage = 1, .recompute = spec::Recompute::kFull};
  EXPECT_EQ(expect_feasible(evaluate(model, cluster, q, 8192, ring)).time.total(),
            expect_feasible(evaluate(model, cluster, q, 8192, gather)).time.total());
}

// Waiting for the slowest rank (straggler.h): E[max of n normals] tabulated and continued by
// Blom's approximation; with a device's compute jitter every blocking tensor-parallel call and the
// step's last data-parallel reduction wait σ·e_n more, σ = jitter·√(compute since the last call),
// and nothing else moves; a single rank never waits.
TEST(StepEstimator, BlockingCallsWaitForTheSlowestRank) {
  EXPECT_EQ(expected_max_of_normals(1), 0.0);
  EXPECT_NEAR(expected_max_of_normals(2), 1 / std::sqrt(std::acos(-1.0)), 1e-4);
  EXPECT_NEAR(expected_max_of_normals(17), 1.79, 0.02);  // tables: 1.7939
  EXPECT_NEAR(expected_max_of_normals(100), 2.5076, 0.03);
  EXPECT_EQ(straggler_wait(0.0, core::Seconds(1), 8).value(), 0.0);
  EXPECT_NEAR(straggler_wait(0.01, core::Seconds(0.04), 2).value(), 0.01 * 0.2 * 0.5642, 1e-9);

  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  CostModelOptions steady, jittery;
  jittery.compute_jitter_sqrt_s = 0.01;
  const spec::ParallelConfig tp{.tp = 2, .dp = 4, .global_batch = 8, .zero_stage = 1};
  const Estimate a = expect_feasible(evaluate(model, cluster, tp, 4096, steady));
  const Estimate b = expect_feasible(evaluate(model, cluster, tp, 4096, jittery));
  EXPECT_GT(b.time.tp_comm.value(), a.time.tp_comm.value());
  EXPECT_GT(b.time.dp_comm.value(), a.time.dp_comm.value());
  EXPECT_EQ(b.time.compute.value(), a.time.compute.value());
  EXPECT_EQ(b.time.optimizer.value(), a.time.optimizer.value());
  // The step's last reduction: jitter·√(the step's compute)·e_4 over the dp group of 4.
  const double dp_wait = 0.01 * std::sqrt((a.time.compute + a.time.recompute).value()) * expected_max_of_normals(4);
  EXPECT_GT(b.time.dp_comm.value() - a.time.dp_comm.value(), 0.99 * dp_wait);
  const auto small = spec::find_catalog_model("tiny")->spec;
  const auto single = cat().cluster_for_gpu("h100", 1, "--gpu");
  const spec::ParallelConfig one{.global_batch = 1};
  EXPECT_EQ(expect_feasible(evaluate(small, single, one, 128, jittery)).time.total(),
            expect_feasible(evaluate(small, single, one, 128, steady)).time.total());
}

// A node of 8 ranks of 1 thread on 4 cores (spec::SharedCores): the profile's rates were measured
// with all 8 computing, each on half a core.
TEST(ComputeSharing, ARankRunsFasterWhileFewerRanksCompute) {
  auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig pp2{.dp = 4, .pp = 2, .global_batch = 8};
  EXPECT_FALSE(ComputeSharing(cluster, pp2).active());  // GPUs: each computes on its own
  cluster.node.shared_cores = spec::SharedCores{4, 1};
  const ComputeSharing sharing(cluster, pp2);
  ASSERT_TRUE(sharing.active());
  const std::vector<char> both{1, 1}, first{1, 0};
  EXPECT_DOUBLE_EQ(sharing.speed(both, 0), 1.0);   // 8 threads on 4 cores, as measured
  EXPECT_DOUBLE_EQ(sharing.speed(first, 0), 2.0);  // 4 threads on 4 cores: a core each
  cluster.node.shared_cores = spec::SharedCores{2, 1};
  EXPECT_DOUBLE_EQ(ComputeSharing(cluster, pp2).speed(first, 0), 2.0);  // 4 on 2 cores vs 8 on 2
  cluster.node.shared_cores = spec::SharedCores{8, 1};
  EXPECT_FALSE(ComputeSharing(cluster, pp2).active());  // a core per rank: nothing shared
}

// The estimate on such a node: a pipeline's ranks run faster in its bubble, so the step is shorter
// than on the same profile with a core per rank; a single stage using every rank is unchanged, and
// one using half of them computes twice as fast.
TEST(StepEstimator, RanksSharingCoresRunFasterWhileOthersWait) {
  const auto model = spec::find_catalog_model("tiny")->spec;
  auto own = cat().cluster_for_gpu("h100", 8, "--gpu");
  auto shared = own;
  shared.node.shared_cores = spec::SharedCores{4, 1};
  const spec::ParallelConfig pp2{.dp = 4, .pp = 2, .micro_batch = 1, .global_batch = 8};
  const Estimate a = expect_feasible(evaluate(model, own, pp2, 128));
  const Estimate b = expect_feasible(evaluate(model, shared, pp2, 128));
  EXPECT_LT(b.time.total().value(), 0.95 * a.time.total().value());
  EXPECT_LT(b.time.pp_bubble.value(), a.time.pp_bubble.value());
  const spec::ParallelConfig dp8{.dp = 8, .global_batch = 8};
  EXPECT_DOUBLE_EQ(expect_feasible(evaluate(model, shared, dp8, 128)).time.total().value(),
                   expect_feasible(evaluate(model, own, dp8, 128)).time.total().value());
  auto half_own = cat().cluster_for_gpu("h100", 4, "--gpu");
  auto half_shared = half_own;
  half_shared.node.shared_cores = spec::SharedCores{4, 1};
  const spec::ParallelConfig dp4{.dp = 4, .global_batch = 8};
  const Estimate c = expect_feasible(evaluate(model, half_own, dp4, 128));
  const Estimate d = expect_feasible(evaluate(model, half_shared, dp4, 128));
  EXPECT_NEAR(d.time.compute.value(), 0.5 * c.time.compute.value(), 1e-12);
}

// Each communication term is zero when its configuration is off (costmodel-reference §5.3).
TEST(StepEstimator, EveryTermIsOffWhenItsAxisIsOff) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const Estimate one =
      expect_feasible(evaluate(model, cluster, spec::ParallelConfig{.tp = 8, .global_batch = 8}, 4096));
  EXPECT_EQ(one.time.dp_comm.value(), 0.0);
  EXPECT_EQ(one.time.pp_bubble.value(), 0.0);
  EXPECT_EQ(one.time.pp_comm.value(), 0.0);
  EXPECT_EQ(one.time.cp_comm.value(), 0.0);
  EXPECT_GT(one.time.tp_comm.value(), 0.0);
  const Estimate dp = expect_feasible(
      evaluate(model, cluster, spec::ParallelConfig{.dp = 8, .global_batch = 64, .zero_stage = 1}, 4096));
  EXPECT_EQ(dp.time.tp_comm.value(), 0.0);
  EXPECT_GT(dp.time.dp_comm.value(), 0.0);
  const Estimate pp =
      expect_feasible(evaluate(model, cluster, spec::ParallelConfig{.tp = 2, .pp = 4, .global_batch = 8}, 4096));
  EXPECT_GT(pp.time.pp_bubble.value(), 0.0);
}

// ZeRO-2 reduce-scatters after every microbatch: with gradient accumulation it communicates more
// than ZeRO-1 (which reduces once per step), and holds less gradient memory.
TEST(StepEstimator, ZeroTwoReducesEveryMicrobatch) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 64, "--gpu");
  CostModelOptions no_overlap;
  no_overlap.overlap_dp_with_backward = false;
  auto run = [&](int zero, int gb) {
    return expect_feasible(
        evaluate(model, cluster,
                 spec::ParallelConfig{.tp = 2, .dp = 32, .micro_batch = 1, .global_batch = gb, .zero_stage = zero},
                 4096, no_overlap));
  };
  const Estimate z1 = run(1, 32 * 8), z2 = run(2, 32 * 8);  // 8 microbatches
  EXPECT_GT(z2.time.dp_comm.value(), z1.time.dp_comm.value() * 3);
  EXPECT_LT(z2.peak_memory().grads, z1.peak_memory().grads);
  const Estimate z1one = run(1, 32), z2one = run(2, 32);  // 1 microbatch: the same traffic
  EXPECT_NEAR(z2one.time.dp_comm.value(), z1one.time.dp_comm.value(), 1e-12);
}

// ZeRO-3 gathers parameters every microbatch (hidden behind compute here, but slowing it); ZeRO-1
// gathers once per step after the optimizer, exposed, and needs more memory.
TEST(StepEstimator, ZeroStagesTradeMemoryForCommunication) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 16, "--gpu");
  auto run = [&](int zero) {
    return expect_feasible(
        evaluate(model, cluster,
                 spec::ParallelConfig{.dp = 16, .micro_batch = 1, .global_batch = 64, .zero_stage = zero}, 4096));
  };
  const Estimate z1 = run(1);
  const Estimate z3 = run(3);
  EXPECT_LT(z3.peak_memory().total(), z1.peak_memory().total());
  EXPECT_GT(z3.time.other, z1.time.other);
  EXPECT_GT(z1.time.dp_comm, z3.time.dp_comm);
  EXPECT_GT(z1.mfu, 0.2);
  EXPECT_LT(z1.mfu, 0.8);
}

// cpt's executor (eager dispatch) gathers the ZeRO-3 root unit (embedding, final norm, LM head)
// before every microbatch's forward and reduce-scatters its gradients after its backward, with
// nothing beside them: the data-parallel time grows by exactly those two calls per microbatch over
// the same plan priced for a runtime that does not (fused dispatch, whose root goes unpriced).
TEST(StepEstimator, EagerZeroThreeExposesTheRootUnitEveryMicrobatch) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig p{.dp = 8, .micro_batch = 1, .global_batch = 24, .zero_stage = 3};  // 3 microbatches
  const CostModelOptions fused, eager = eager_dispatch();
  const Estimate f = expect_feasible(evaluate(model, cluster, p, 4096, fused));
  const Estimate e = expect_feasible(evaluate(model, cluster, p, 4096, eager));
  const Topology topo(cluster);
  const auto dp = topo.place(spec::RankLayout(p, 8), spec::Axis::kDp);
  const double root = root_params(model, model.param_counts(), 1, true, true, true);
  const double per_microbatch =
      collective_time(Collective::kAllGather, core::Bytes(static_cast<std::int64_t>(root * 2)), dp,
                      eager.network_efficiency)
          .value() +
      collective_time(Collective::kReduceScatter, core::Bytes(static_cast<std::int64_t>(root * 4)), dp,
                      eager.network_efficiency)
          .value() +
      2 * eager.collective_overhead.value();
  // The executor's scalar all-reduces over the 8 replicas: the loss, its token count and the
  // sharded gradient norm (spec::executor_step_scalar_all_reduces).
  const double scalars =
      3 * (collective_time(Collective::kAllReduce, core::Bytes(16), dp, eager.network_efficiency).value() +
           eager.collective_overhead.value());
  // The eager plan's other differences (kernels around calls, its own buckets) are not in dp_comm
  // for ZeRO-3; the root's two calls and the scalar all-reduces are.
  EXPECT_NEAR(e.time.dp_comm.value() - f.time.dp_comm.value(), 3 * per_microbatch + scalars, 1e-3 * per_microbatch);
}

// The executor's scalar all-reduces inside a node cost 2(n − 1) of the node's measured scalar
// step latency where the profile has one (spec::NodeSpec::scalar_all_reduce_step_latency), in
// place of the link's all-reduce of 16 bytes: DP2 has two (the loss and its token count).
TEST(StepEstimator, ScalarAllReducesUseTheNodesMeasuredLatency) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig p{.tp = 4, .dp = 2, .micro_batch = 1, .global_batch = 8};
  const CostModelOptions eager = eager_dispatch();
  const Estimate link = expect_feasible(evaluate(model, cluster, p, 4096, eager));
  cluster.node.scalar_all_reduce_step_latency = core::microseconds(1000);
  const Estimate measured = expect_feasible(evaluate(model, cluster, p, 4096, eager));
  const Topology topo(cluster);
  const auto dp = topo.place(spec::RankLayout(p, 8), spec::Axis::kDp);
  const double on_link = collective_time(Collective::kAllReduce, core::Bytes(16), dp, eager.network_efficiency).value();
  EXPECT_NEAR(measured.time.dp_comm.value() - link.time.dp_comm.value(), 2 * (2 * 1e-3 - on_link), 1e-9);
  // And tp's one (the gradient norm), on 4 ranks: 6 steps.
  const auto tp = topo.place(spec::RankLayout(p, 8), spec::Axis::kTp);
  const double tp_link = collective_time(Collective::kAllReduce, core::Bytes(16), tp, eager.network_efficiency).value();
  EXPECT_NEAR(measured.time.tp_comm.value() - link.time.tp_comm.value(), 6 * 1e-3 - tp_link, 1e-9);
  EXPECT_EQ(measured.calls_per_step.dp, link.calls_per_step.dp);
  // Over pp (the loss and the norm) inside the node likewise: pp 2, 2 steps each.
  const spec::ParallelConfig piped{.tp = 4, .pp = 2, .micro_batch = 1, .global_batch = 8};
  auto without = cluster;
  without.node.scalar_all_reduce_step_latency.reset();
  const Estimate pp_link = expect_feasible(evaluate(model, without, piped, 4096, eager));
  const Estimate pp_measured = expect_feasible(evaluate(model, cluster, piped, 4096, eager));
  const auto pp = topo.place(spec::RankLayout(piped, 8), spec::Axis::kPp);
  const double pp_on_link =
      collective_time(Collective::kAllReduce, core::Bytes(16), pp, eager.network_efficiency).value();
  EXPECT_NEAR(pp_measured.time.pp_comm.value() - pp_link.time.pp_comm.value(), 2 * (2 * 1e-3 - pp_on_link), 1e-9);
}

// A node's measured overlap slowdown (spec::NodeSpec::overlap_compute_slowdown) replaces the GPU
// default inside the node: ZeRO-3's prefetched gathers, overlapped with compute, cost that fraction
// of their time in compute — linearly in it. Across nodes the network's slowdown stands.
TEST(StepEstimator, OverlappedCommunicationCostsTheNodesMeasuredSlowdown) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig p{.dp = 8, .micro_batch = 1, .global_batch = 8, .zero_stage = 3};
  const CostModelOptions eager = eager_dispatch();
  const Estimate gpu_default = expect_feasible(evaluate(model, cluster, p, 4096, eager));
  EXPECT_DOUBLE_EQ(gpu_default.stages.overlap_slowdown, eager.overlap_slowdown_nvlink);
  auto other_at = [&](double slowdown) {
    auto c = cluster;
    c.node.overlap_compute_slowdown = slowdown;
    const Estimate e = expect_feasible(evaluate(model, c, p, 4096, eager));
    EXPECT_DOUBLE_EQ(e.stages.overlap_slowdown, slowdown);
    return e.time.other.value();
  };
  const double none = other_at(0), half = other_at(0.5), all = other_at(1.0);
  EXPECT_GT(half, none);
  EXPECT_NEAR(all - none, 2 * (half - none), 1e-9 * all);
  EXPECT_NEAR(gpu_default.time.other.value() - none, eager.overlap_slowdown_nvlink * (all - none), 1e-9 * all);
  // Two nodes, the gathers over the network: the node's value does not apply.
  auto two_nodes = cat().cluster_for_gpu("h100", 16, "--gpu");
  two_nodes.node.overlap_compute_slowdown = 1.0;
  const Estimate across = expect_feasible(
      evaluate(model, two_nodes, spec::ParallelConfig{.dp = 16, .micro_batch = 1, .global_batch = 16, .zero_stage = 3},
               4096, eager));
  EXPECT_DOUBLE_EQ(across.stages.overlap_slowdown, eager.overlap_slowdown_network);
}

// A calibrated host loses compute resuming from each blocking call (NodeSpec::
// compute_lost_resuming_from_call): charged to the compute of the tensor-parallel passes (a
// reduce-scatter and an all-gather per block collective under sequence parallelism), of CP's
// gathers and of the pipeline's receives and sends, exactly once per call the step makes there;
// the communication terms do not change, and a data-parallel plan (overlapped calls) pays nothing.
TEST(StepEstimator, ResumingFromABlockingCallCostsTheNodesMeasuredCompute) {
  const auto model = spec::find_catalog_model("tiny")->spec;
  const CostModelOptions eager = as_run_by_cpt_executor(CostModelOptions{});  // CP: all-gathers
  int row = 0;
  for (const spec::ParallelConfig& p :
       {spec::ParallelConfig{.tp = 2, .micro_batch = 2, .global_batch = 4, .sequence_parallel = true},
        spec::ParallelConfig{.tp = 2, .micro_batch = 2, .global_batch = 4},
        spec::ParallelConfig{.cp = 2, .micro_batch = 2, .global_batch = 4},
        spec::ParallelConfig{.pp = 2, .micro_batch = 1, .global_batch = 4},
        spec::ParallelConfig{.tp = 2, .pp = 2, .micro_batch = 1, .global_batch = 4, .sequence_parallel = true}}) {
    ++row;
    const auto cluster = cat().cluster_for_gpu("h100", p.world_size(), "--gpu");
    auto host = cluster;
    host.node.compute_lost_resuming_from_call = core::microseconds(200);
    const Estimate a = expect_feasible(evaluate(model, cluster, p, 128, eager));
    const Estimate b = expect_feasible(evaluate(model, host, p, 128, eager));
    // The step's blocking calls but its scalar all-reduces (at the step's end, before the optimizer).
    const auto scalars = spec::executor_step_scalar_all_reduces(p, 1);
    const double calls = a.calls_per_step.tp - scalars.tp + a.calls_per_step.cp + a.calls_per_step.pp - scalars.pp;
    ASSERT_GT(calls, 0) << row;
    EXPECT_NEAR(b.time.compute.value() - a.time.compute.value(), 200e-6 * calls, 1e-12) << row;
    EXPECT_DOUBLE_EQ(b.time.tp_comm.value(), a.time.tp_comm.value()) << row;
    // The pipeline's bubble grows with its stages too.
    const double grown = b.time.total().value() - a.time.total().value();
    if (p.pp == 1) {
      EXPECT_NEAR(grown, 200e-6 * calls, 1e-9) << row;
    } else {
      EXPECT_GE(grown, 200e-6 * calls - 1e-9) << row;
      // The stages the pipeline replays (and the simulator with it) carry it: one receive and one
      // send per pass into and out of each stage, but into the first and out of the last.
      const int stages = static_cast<int>(a.stages.forward_s.size());
      for (int s = 0; s < stages; ++s) {
        const auto i = static_cast<std::size_t>(s);
        const double boundaries = (s > 0 ? 1.0 : 0.0) + (s < stages - 1 ? 1.0 : 0.0);
        if (p.tp == 1) {
          EXPECT_NEAR(b.stages.forward_s[i] - a.stages.forward_s[i], 200e-6 * boundaries, 1e-12) << row << " " << s;
          EXPECT_NEAR(b.stages.backward_s[i] - a.stages.backward_s[i], 200e-6 * boundaries, 1e-12) << row << " " << s;
        }
      }
      const auto schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, p.grad_accum());
      const auto simulated = sim::simulate_step(schedule, b.stages, std::vector<double>(a.stages.forward_s.size(), 1.0),
                                                std::vector<double>(static_cast<std::size_t>(p.pp), 0.0));
      EXPECT_NEAR(simulated.step_time.value() / b.time.total().value(), 1.0, 1e-3) << row;
    }
  }
  const spec::ParallelConfig dp{.dp = 2, .micro_batch = 2, .global_batch = 4};
  const auto cluster = cat().cluster_for_gpu("h100", 2, "--gpu");
  auto host = cluster;
  host.node.compute_lost_resuming_from_call = core::microseconds(200);
  EXPECT_DOUBLE_EQ(expect_feasible(evaluate(model, host, dp, 128, eager)).time.total().value(),
                   expect_feasible(evaluate(model, cluster, dp, 128, eager)).time.total().value());
}

// Context-parallel ranks hold the same parameters, so gradients are summed over dp × cp (Megatron's
// data-and-context-parallel group): cp 2 × dp 1 reduces them like dp 2 × cp 1 does, over two
// NVLink ranks holding the same parameters.
TEST(StepEstimator, ContextParallelRanksReduceTheirGradients) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = cat().cluster_for_gpu("h100", 8, "--gpu");
  const Estimate cp2 = expect_feasible(
      evaluate(model, cluster, spec::ParallelConfig{.tp = 4, .cp = 2, .micro_batch = 1, .global_batch = 8}, 8192));
  const Estimate dp2 = expect_feasible(
      evaluate(model, cluster, spec::ParallelConfig{.tp = 4, .dp = 2, .micro_batch = 1, .global_batch = 8}, 8192));
  EXPECT_GT(cp2.stages.dp_reduce.value(), 0.0);
  EXPECT_NEAR(cp2.stages.dp_reduce.value(), dp2.stages.dp_reduce.value(), 1e-9);
}

}  // namespace
}  // namespace cpt::cost
