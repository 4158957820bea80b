#include "costmodel/sim/step_simulator.h"

#include <gtest/gtest.h>

#include <map>

#include "costmodel/memory_model.h"
#include "costmodel/pipeline_replay.h"
#include "core/error.h"
#include "costmodel/sim/chrome_trace.h"
#include "costmodel/sim/plan_simulation.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/rank_layout.h"
#include <nlohmann/json.hpp>

namespace cpt::cost::sim {
namespace {

StageDurations uniform(int stages, double f, double b) {
  StageDurations d;
  d.forward_s.assign(static_cast<std::size_t>(stages), f);
  d.backward_s.assign(static_cast<std::size_t>(stages), b);
  d.p2p_after_s.assign(static_cast<std::size_t>(stages), 0.0);
  return d;
}

SimulationResult run(const spec::PipelineSchedule& s, const StageDurations& d) {
  return simulate_step(s, d, std::vector<double>(static_cast<std::size_t>(s.num_stages()), 1.0),
                       std::vector<double>(static_cast<std::size_t>(s.pp), 0.0));
}

// Readable units (forward 1, backward 2): the 1F1B step is (m + p − 1)·3 and the bubble is
// (p − 1)/(m + p − 1) of it (Narayanan et al. 2021 §2.2); interleaving divides the bubble by v.
TEST(StepSimulator, BubbleOfOneFOneBAndInterleaving) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 4, 16}) {
      const auto r = run(spec::make_schedule(spec::ScheduleKind::k1F1B, p, 1, m), uniform(p, 1, 2));
      EXPECT_DOUBLE_EQ(r.step_time.value(), (m + p - 1) * 3.0) << p << " " << m;
      EXPECT_NEAR(r.bubble_fraction, static_cast<double>(p - 1) / (m + p - 1), 1e-12) << p << " " << m;
    }
  }
  const int p = 4, v = 2, m = 8;
  const auto r = run(spec::make_schedule(spec::ScheduleKind::kInterleaved1F1B, p, v, m), uniform(p * v, 0.5, 1.0));
  EXPECT_DOUBLE_EQ(r.step_time.value(), m * 3.0 + (p - 1) * 3.0 / v);
}

// With transfers and uneven stages, and no contention on the communication streams, the simulation
// equals the list-scheduling replay of the cost model.
TEST(StepSimulator, EqualsTheReplayWithoutContention) {
  const auto s = spec::make_schedule(spec::ScheduleKind::kInterleaved1F1B, 4, 2, 8);
  StageDurations d = uniform(8, 0.5, 1.0);
  for (std::size_t i = 0; i < 8; ++i) {
    d.forward_s[i] += 0.05 * static_cast<double>(i);
    d.backward_s[i] += 0.03 * static_cast<double>(i % 3);
    d.p2p_after_s[i] = i < 7 ? 0.01 : 0.0;
  }
  const auto r = run(s, d);
  EXPECT_NEAR(r.step_time.value(), replay_schedule(s, d.forward_s, d.backward_s, d.p2p_after_s).makespan.value(), 1e-9);
}

// ZB-H1: the simulator runs I and W with the cost model's split, equals the replay (uneven stages,
// transfers), frees activations at W as the memory model counts, and releases the data-parallel
// buckets with the last W.
TEST(StepSimulator, ZeroBubbleH1EqualsTheReplayAndTheMemoryModel) {
  const int p = 4, m = 8;
  const auto s = spec::make_schedule(spec::ScheduleKind::kZeroBubbleH1, p, 1, m);
  StageDurations d = uniform(p, 1.0, 2.0);
  d.weight_grad_s.assign(static_cast<std::size_t>(p), 0.9);
  for (std::size_t i = 0; i < 4; ++i) {
    d.forward_s[i] += 0.1 * static_cast<double>(i);
    d.p2p_after_s[i] = i < 3 ? 0.02 : 0.0;
  }
  const std::vector<double> act = {1, 2, 3, 4}, stat = {10, 10, 10, 10};
  const auto r = simulate_step(s, d, act, stat);
  EXPECT_NEAR(r.step_time.value(),
              replay_schedule(s, d.forward_s, d.backward_s, d.p2p_after_s, d.weight_grad_s).makespan.value(), 1e-9);
  for (int rank = 0; rank < p; ++rank) {
    EXPECT_DOUBLE_EQ(r.peak_bytes[static_cast<std::size_t>(rank)], 10 + spec::max_live_weight(s, rank, act)) << rank;
  }
  const auto one = simulate_step(spec::make_schedule(spec::ScheduleKind::k1F1B, p, 1, m), d, act, stat);
  // Uneven stages leave a bubble no schedule removes (the uniform case is exact in
  // pipeline_replay_test.cpp); here 30.42 vs 35.82 s, bubble 21% vs 33%.
  EXPECT_LT(r.step_time.value(), one.step_time.value() * 0.9);
  EXPECT_LT(r.bubble_fraction, one.bubble_fraction * 0.7);
  int weights = 0;
  for (const auto& i : r.intervals) weights += i.name[0] == 'W' ? 1 : 0;
  EXPECT_EQ(weights, p * m);
}

// No two tasks overlap on one stream; each forward starts after its input arrived.
TEST(StepSimulator, StreamsAreSerialAndDependenciesHold) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 4, 1, 6);
  StageDurations d = uniform(4, 1, 2);
  d.p2p_after_s = {0.2, 0.2, 0.2, 0};
  d.dp_reduce = core::Seconds(1.5);
  d.dp_buckets = 3;
  const auto r = run(s, d);
  std::map<std::pair<int, int>, std::vector<Interval>> by_stream;
  std::map<std::string, Interval> by_name;
  for (const auto& i : r.intervals) {
    by_stream[{i.pp_rank, static_cast<int>(i.stream)}].push_back(i);
    by_name[i.name] = i;
  }
  for (auto& [key, list] : by_stream) {
    std::sort(list.begin(), list.end(), [](const Interval& a, const Interval& b) { return a.start_s < b.start_s; });
    for (std::size_t k = 1; k < list.size(); ++k) EXPECT_GE(list[k].start_s, list[k - 1].end_s - 1e-12) << list[k].name;
  }
  for (int st = 1; st < 4; ++st) {
    for (int mb = 0; mb < 6; ++mb) {
      const auto& f = by_name.at(spec::to_string(spec::Action{spec::ActionKind::kForward, st, mb}));
      const auto& prev = by_name.at(spec::to_string(spec::Action{spec::ActionKind::kForward, st - 1, mb}));
      EXPECT_GE(f.start_s, prev.end_s + 0.2 - 1e-12);
    }
  }
}

// Gradient buckets overlap the backward that produces them; what does not fit is exposed.
TEST(StepSimulator, DataParallelBucketsOverlapTheLastBackward) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 1, 1, 1);
  StageDurations d = uniform(1, 1, 1);
  d.dp_buckets = 5;
  d.dp_reduce = core::Seconds(0.5);  // 5 buckets of 0.1, ready every 0.2 of the backward: only the last is exposed
  EXPECT_NEAR(run(s, d).step_time.value(), 2.1, 1e-12);
  d.dp_reduce = core::Seconds(3.0);  // 5 buckets of 0.6: the first starts at 0.2 of the backward, all end at 3.2
  const auto r = run(s, d);
  EXPECT_NEAR(r.step_time.value(), 1 + 3.2, 1e-12);
  EXPECT_NEAR(r.exposed_comm.value(), 2.2, 1e-12);
  d.dp_after = core::Seconds(0.25);
  d.optimizer = core::Seconds(0.5);
  EXPECT_NEAR(run(s, d).step_time.value(), 1 + 3.2 + 0.25 + 0.5, 1e-12);
}

// Computing beside communication costs overlap_slowdown per second of it (the estimate's `other`):
// a bucket running beside the backward lengthens it, and the last bucket waits for the lengthened
// backward; ZeRO-3's hidden gathers and reduce-scatters lengthen the task that hides them.
TEST(StepSimulator, CommunicationBesideComputeSlowsIt) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 1, 1, 1);
  StageDurations d = uniform(1, 1, 1);
  d.dp_buckets = 5;
  d.dp_reduce = core::Seconds(0.5);  // buckets of 0.1 ready at 1.2, 1.4, 1.6, 1.8: 0.4 s beside the backward
  d.overlap_slowdown = 1;
  EXPECT_NEAR(run(s, d).step_time.value(), 1 + 1 + 0.4 + 0.1, 1e-12);
  d.overlap_slowdown = 0.5;
  EXPECT_NEAR(run(s, d).step_time.value(), 1 + 1 + 0.2 + 0.1, 1e-12);
  StageDurations z = uniform(1, 1, 1);
  z.overlap_slowdown = 0.5;
  z.zero3_overlapped_forward_s = {0.2};
  z.zero3_overlapped_backward_s = {0.4};
  const auto r = run(s, z);
  EXPECT_NEAR(r.step_time.value(), 1.1 + 1.2, 1e-12);
  EXPECT_NEAR(r.compute_busy_s[0], 2.3, 1e-12);
}

// Ranks computing twice as fast as the profile (shared cores, fewer busy than measured): the
// buckets become ready at their share of the backward's work, so at twice the pace, in order,
// and all before the step ends.
TEST(StepSimulator, BucketsFollowTheBackwardsWorkAtItsSpeed) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 1, 1, 1);
  StageDurations d = uniform(1, 1, 1);
  d.dp_buckets = 5;
  d.dp_reduce = core::Seconds(0.5);  // buckets of 0.1 ready at 0.6, 0.7, 0.8, 0.9 and 1.0
  const RankSpeed twice = [](std::span<const char>, int) { return 2.0; };
  const auto r = simulate_step(s, d, {1.0}, {0.0}, twice);
  EXPECT_NEAR(r.step_time.value(), 1.1, 1e-12);
  std::vector<double> starts;
  for (const auto& i : r.intervals) {
    if (i.name.starts_with("dp bucket")) starts.push_back(i.start_s);
  }
  ASSERT_EQ(starts.size(), 5u);
  for (std::size_t b = 0; b < starts.size(); ++b) EXPECT_NEAR(starts[b], 0.6 + 0.1 * static_cast<double>(b), 1e-12);
}

// A ZeRO-3 plan on a node that loses a whole second of compute per second of overlapped
// communication (a calibrated CPU's measured slowdown): the simulation charges what the estimate's
// `other` charges.
TEST(StepSimulator, AgreesWithTheEstimatesOverlapCharge) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  cluster.node.overlap_compute_slowdown = 1.0;
  for (const int zero : {2, 3}) {
    const spec::ParallelConfig p{.tp = 1,
                                 .dp = 8,
                                 .pp = 1,
                                 .micro_batch = 1,
                                 .global_batch = 32,
                                 .zero_stage = zero,
                                 .recompute = spec::Recompute::kFull};
    const auto est = std::get<Estimate>(evaluate(model, cluster, p, 4096));
    ASSERT_GT(est.time.other.value(), 0.02 * est.time.total().value()) << zero;
    const auto schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, p.grad_accum());
    const auto r = simulate_step(schedule, est.stages, {1.0}, {0.0});
    EXPECT_NEAR(r.step_time.value() / est.time.total().value(), 1.0, 0.02) << zero;
  }
}

// Per-rank mode. Identical replicas: the same step as the symmetric simulation, every task once per
// replica. A straggler in one replica: its buckets and the step-end collective hold the other
// replicas back, so the step is the straggler replica's (the symmetric answer), but the healthy
// replicas finish their compute early and wait.
TEST(StepSimulator, PerRankModeSynchronisesReplicasAtTheReductions) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 2, 1, 4);
  StageDurations d = uniform(2, 1, 2);
  d.dp_buckets = 4;
  d.dp_reduce = core::Seconds(2.0);
  d.dp_after = core::Seconds(0.3);
  d.optimizer = core::Seconds(0.1);
  const std::vector<double> act = {1, 1}, stat = {0, 0};
  const auto one = simulate_step(s, d, act, stat);
  const auto three = simulate_replicas(s, {d, d, d}, act, stat);
  EXPECT_DOUBLE_EQ(three.step_time.value(), one.step_time.value());
  EXPECT_EQ(three.intervals.size(), 3 * one.intervals.size());

  StageDurations slow = d;
  for (double* x : {&slow.forward_s[1], &slow.backward_s[1]}) *x *= 1.5;  // pp rank 1 of replica 2
  const auto sym = simulate_step(s, slow, act, stat);
  const auto full = simulate_replicas(s, {d, d, slow}, act, stat);
  EXPECT_DOUBLE_EQ(full.step_time.value(), sym.step_time.value());
  EXPECT_EQ(full.critical_replica, 2);  // the replica the others waited for
  double healthy_end = 0, slow_end = 0;
  for (const auto& i : full.intervals) {
    if (i.stream != Stream::kCompute || i.name == "optimizer" || i.pp_rank != 1) continue;
    (i.replica == 2 ? slow_end : healthy_end) = std::max(i.replica == 2 ? slow_end : healthy_end, i.end_s);
  }
  EXPECT_LT(healthy_end, slow_end - 1.0);
  // Every replica's optimizer starts after the same step-end collective.
  std::vector<double> optimizer_starts;
  for (const auto& i : full.intervals) {
    if (i.name == "optimizer" && i.pp_rank == 0) optimizer_starts.push_back(i.start_s);
  }
  ASSERT_EQ(optimizer_starts.size(), 3u);
  EXPECT_DOUBLE_EQ(optimizer_starts[0], optimizer_starts[2]);
}

// A degraded link on one replica's pipeline transfer slows that replica, and through the reductions
// the step; a slower data-parallel collective of one pipeline rank runs slower on every replica,
// and costs time only where it is not hidden (pp rank 0 finishes last in 1F1B; rank 1 has slack).
TEST(StepSimulator, PerRankModeSlowLinks) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 2, 1, 4);
  StageDurations d = uniform(2, 1, 2);
  d.p2p_after_s = {0.1, 0.0};
  d.dp_buckets = 1;
  d.dp_reduce = core::Seconds(0.5);
  const std::vector<double> act = {1, 1}, stat = {0, 0};
  const double base = simulate_replicas(s, {d, d}, act, stat).step_time.value();
  StageDurations slow_p2p = d;
  slow_p2p.p2p_after_s[0] = 1.0;
  EXPECT_GT(simulate_replicas(s, {d, slow_p2p}, act, stat).step_time.value(), base + 1.0);
  for (std::size_t slow_rank : {0u, 1u}) {
    StageDurations slow_dp = d;
    slow_dp.dp_slowdown = {1.0, 1.0};
    slow_dp.dp_slowdown[slow_rank] = 4.0;  // that pp rank's ring runs at a 4x slower link
    const auto r = simulate_replicas(s, {d, slow_dp}, act, stat);
    int slow_buckets = 0;
    for (const auto& i : r.intervals) {
      if (i.stream == Stream::kCollective && i.pp_rank == static_cast<int>(slow_rank)) {
        EXPECT_NEAR(i.end_s - i.start_s, 2.0, 1e-12);
        ++slow_buckets;
      }
    }
    EXPECT_EQ(slow_buckets, 2);  // one bucket, on both replicas
    if (slow_rank == 0) {
      EXPECT_NEAR(r.step_time.value(), base + 1.5, 1e-12);  // the exposed bucket grows from 0.5 to 2.0
    } else {
      EXPECT_DOUBLE_EQ(r.step_time.value(), base);  // hidden behind rank 0's drain
    }
  }
}

// The simulated peak equals the memory model's live-microbatch accounting.
TEST(StepSimulator, PeakMemoryMatchesTheSchedule) {
  const auto s = spec::make_schedule(spec::ScheduleKind::kInterleaved1F1B, 4, 3, 8);
  std::vector<double> act(12);
  for (std::size_t i = 0; i < 12; ++i) act[i] = 1.0 + static_cast<double>(i);
  const std::vector<double> stat = {10, 20, 30, 40};
  const auto r = simulate_step(s, uniform(12, 1, 2), act, stat);
  for (int p = 0; p < 4; ++p) {
    EXPECT_DOUBLE_EQ(r.peak_bytes[static_cast<std::size_t>(p)],
                     stat[static_cast<std::size_t>(p)] + spec::max_live_weight(s, p, act));
  }
}

// Llama 3 8B on 32 H100: TP 2 with SP, DP 4, PP 4, selective recompute.
spec::ParallelConfig real_plan_layout() {
  return {.tp = 2,
          .dp = 4,
          .pp = 4,
          .micro_batch = 1,
          .global_batch = 64,
          .zero_stage = 1,
          .recompute = spec::Recompute::kSelective,
          .sequence_parallel = true};
}

// A real plan: the simulation agrees with the analytical estimate, and writes a Chrome trace.
TEST(StepSimulator, AgreesWithTheEstimateOnARealPlan) {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 32, "--gpu");
  const spec::ParallelConfig p = real_plan_layout();
  const auto est = std::get<Estimate>(evaluate(model, cluster, p, 4096));
  const auto schedule = spec::make_schedule(p.schedule, p.pp, p.virtual_stages, p.grad_accum());
  const auto stages = spec::StagePartition::balanced(model.layers, p.pp, 1);
  const double per_layer =
      static_cast<double>(activation_bytes_per_layer(model, p, 4096, CostModelOptions{}, LayerKind::kDense).value());
  std::vector<double> act;
  for (int st = 0; st < 4; ++st) act.push_back(per_layer * stages.layers_in(st));
  std::vector<double> stat;
  for (const auto& m : est.memory_per_pp_rank)
    stat.push_back(static_cast<double>((m.weights + m.grads + m.optimizer).value()));
  const auto r = simulate_step(schedule, est.stages, act, stat);
  EXPECT_NEAR(r.step_time.value() / est.time.total().value(), 1.0, 0.02);
  const auto trace = chrome_trace(r);
  int compute = 0;
  for (const auto& e : trace["traceEvents"]) {
    const auto name = e.value("name", std::string());
    if (e["ph"] == "X" && (name[0] == 'F' || name[0] == 'B')) ++compute;
  }
  EXPECT_EQ(compute, 4 * 16 * 2);  // 4 ranks, 16 microbatches, a forward and a backward each
  EXPECT_EQ(trace["traceEvents"][0]["ph"], "M");
}

}  // namespace
}  // namespace cpt::cost::sim

namespace cpt::cost::sim {
namespace {

spec::Plan per_rank_plan() {
  const auto model = spec::find_catalog_model("llama3-8b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 32, "--gpu");
  const spec::ParallelConfig p = real_plan_layout();
  return spec::make_plan(model, cluster, spec::Workload{4096, 0}, p);
}

// A plan in per-rank mode: a slow GPU slows its whole tensor-parallel group (the same step whichever
// tp rank it is), costs the step what the symmetric straggler costs, and a degraded network link
// of a GPU whose data-parallel ring crosses nodes slows the step.
TEST(PlanSimulation, PerRankStragglerAndSlowNic) {
  const auto plan = per_rank_plan();
  const spec::RankLayout layout(plan.parallel, plan.cluster.node.gpus_per_node);
  const double healthy = simulate_plan(plan).result.step_time.value();
  spec::RankCoord c{};
  c.pp = 2;
  c.dp = 3;
  SimulationOptions w;
  w.straggler_slowdown = 0.3;
  w.straggler_gpu = layout.rank_of(c);
  const auto a = simulate_plan(plan, {}, w);
  c.tp = 1;
  w.straggler_gpu = layout.rank_of(c);
  const auto b = simulate_plan(plan, {}, w);
  EXPECT_DOUBLE_EQ(a.result.step_time.value(), b.result.step_time.value());
  EXPECT_GT(a.result.step_time.value(), healthy * 1.05);
  SimulationOptions sym;
  sym.straggler_slowdown = 0.3;
  sym.straggler_pp_rank = 2;
  EXPECT_NEAR(a.result.step_time.value() / simulate_plan(plan, {}, sym).result.step_time.value(), 1.0, 0.01);
  EXPECT_EQ(a.result.critical_replica, 3);

  SimulationOptions nic;
  nic.slow_nic_gpu = layout.rank_of(c);
  nic.nic_slowdown = 20;
  EXPECT_GT(simulate_plan(plan, {}, nic).result.step_time.value(), healthy);
  nic.straggler_gpu = plan.cluster.num_gpus;  // out of range
  EXPECT_THROW(simulate_plan(plan, {}, nic), core::ConfigError);
}

// Slower links reach every call on them: ZeRO-3's gathers and reduce-scatters inside the passes
// and an MoE's expert all-to-alls, not only transfers and reductions; the JSON's parts still add
// up to the simulated step, a per-rank what-if's remainder under `what_if`.
TEST(PlanSimulation, SlowerLinksSlowZeroThreeAndExpertTraffic) {
  const auto& catalog = spec::HardwareCatalog::builtin();
  const auto llama = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig zero3{.dp = 16, .micro_batch = 1, .global_batch = 64, .zero_stage = 3};
  const auto sharded = spec::make_plan(llama, catalog.cluster_for_gpu("h100", 16, "--gpu"), {4096, 0}, zero3);
  const auto healthy = simulate_plan(sharded);
  SimulationOptions links;
  links.link_slowdown = 20;
  const auto slow = simulate_plan(sharded, {}, links);
  EXPECT_GT(slow.result.step_time.value(), 3 * healthy.result.step_time.value());
  EXPECT_GT(slow.estimate.time.dp_comm.value(), 10 * std::max(1e-3, healthy.estimate.time.dp_comm.value()));
  auto parts = [](const nlohmann::json& j) {
    double sum = 0;
    for (const auto& [name, seconds] : j["time_s"].items()) sum += seconds.get<double>();
    return sum / j["step_time_s"].get<double>();
  };
  EXPECT_NEAR(parts(simulation_to_json(slow, sharded)), 1.0, 0.02);
  // One GPU's network link: ZeRO-3's shard group crosses the two nodes, so every replica waits.
  SimulationOptions nic;
  nic.slow_nic_gpu = 3;
  nic.nic_slowdown = 20;
  const auto slow_nic = simulate_plan(sharded, {}, nic);
  EXPECT_GT(slow_nic.result.step_time.value(), 3 * healthy.result.step_time.value());
  const auto j = simulation_to_json(slow_nic, sharded);
  EXPECT_NEAR(parts(j), 1.0, 1e-9);
  EXPECT_GT(j["time_s"]["what_if"].get<double>(), 0);

  // Qwen3-30B-A3B over two nodes, 16 experts' ranks: its all-to-alls cross the network.
  const auto qwen = spec::find_catalog_model("qwen3-30b-a3b")->spec;
  const spec::ParallelConfig ep{
      .dp = 16, .micro_batch = 1, .global_batch = 64, .zero_stage = 1, .recompute = spec::Recompute::kFull, .ep = 16};
  const auto experts = spec::make_plan(qwen, catalog.cluster_for_gpu("h100", 16, "--gpu"), {4096, 0}, ep);
  const auto before = simulate_plan(experts);
  const auto after = simulate_plan(experts, {}, links);
  EXPECT_NEAR(after.estimate.time.ep_comm.value() / before.estimate.time.ep_comm.value(), 20, 4);
  EXPECT_GT(after.result.step_time.value(),
            before.result.step_time.value() + 10 * before.estimate.time.ep_comm.value());
}

}  // namespace
}  // namespace cpt::cost::sim

namespace cpt::cost::sim {
namespace {

// Ranks sharing CPU cores (a local profile calibrated with more ranks than cores): the simulated
// pipeline runs its ranks faster while the other stage waits, as the estimate's exact replay does,
// and the step is shorter than at the profile's rates throughout.
TEST(PlanSimulation, RanksSharingCoresAgreeWithTheEstimate) {
  const auto model = spec::find_catalog_model("tiny")->spec;
  auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  const spec::ParallelConfig p{.dp = 4, .pp = 2, .micro_batch = 1, .global_batch = 8};
  const auto own = simulate_plan(spec::make_plan(model, cluster, spec::Workload{128, 0}, p));
  cluster.node.shared_cores = spec::SharedCores{4, 1};
  const auto shared = simulate_plan(spec::make_plan(model, cluster, spec::Workload{128, 0}, p));
  EXPECT_NEAR(shared.result.step_time.value() / shared.estimate.time.total().value(), 1.0, 1e-6);
  EXPECT_LT(shared.result.step_time.value(), 0.95 * own.result.step_time.value());
}

}  // namespace
}  // namespace cpt::cost::sim
