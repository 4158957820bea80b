#include "executor/train/optimizer_choice.h"

#include <algorithm>

#include "core/log.h"
#include "spec/executor_support.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

namespace {

// The parameters in the order data parallelism buckets them (spec/parameter_order.h: the reverse
// of it is the order backward produces their gradients).
NamedParams in_gradient_order(NamedParams named) {
  std::stable_sort(named.begin(), named.end(), [](const auto& a, const auto& b) {
    return spec::gradient_order_key(a.first) < spec::gradient_order_key(b.first);
  });
  return named;
}

// ZeRO-0, 1 or 2 over `replicas` for `named`.
std::unique_ptr<StepOptimizer> data_parallel_optimizer(const spec::ParallelConfig& par, const TrainConfig& config,
                                                       const NamedParams& named, Communicator& replicas,
                                                       const ModelParallelNorm& norm_groups) {
  const auto bucket_bytes = static_cast<std::int64_t>(config.dp_bucket_mib * 1024 * 1024);
  if (par.zero_stage == 0) {
    return make_replicated_optimizer(in_gradient_order(named), config.optimizer, replicas, bucket_bytes, norm_groups);
  }
  ZeroOptions zero;
  zero.stage = par.zero_stage;
  zero.bucket_bytes = bucket_bytes;
  zero.reduce_each_microbatch = spec::executor_zero2_reduces_each_microbatch(par);
  zero.offload = par.offload == spec::Offload::kOptimizer;
  return make_zero_optimizer(in_gradient_order(named), config.optimizer, replicas, zero, norm_groups);
}

}  // namespace

std::pair<NamedParams, NamedParams> split_routed_experts(const NamedParams& named) {
  std::pair<NamedParams, NamedParams> parts;
  for (const auto& entry : named) (spec::is_routed_expert(entry.first) ? parts.second : parts.first).push_back(entry);
  return parts;
}

OptimizerChoice choose_step_optimizer(const spec::ParallelConfig& par, const TrainConfig& config,
                                      const NamedParams& named, const ProcessGroups& groups, LlamaModel& model) {
  const ModelParallelNorm norm_groups{groups.tp.get(), groups.pp.get()};
  Communicator& replicas = groups.replicas();
  OptimizerChoice choice;
  const bool hybrid = par.hybrid_shard && groups.dp_shard;
  choice.shard_group = hybrid ? groups.dp_shard.get() : &replicas;
  // The routed experts' squares: each rank's shard of its experts, summed over etp and ep.
  const ModelParallelNorm expert_norm{groups.etp.get(), groups.pp.get(), groups.ep.get()};
  if (par.zero_stage == 3) {
    const bool offload = par.offload == spec::Offload::kOptimizer;
    std::unique_ptr<FullyShardedModel> sharded;
    if (groups.expert_dp) {
      // The routed experts apart from their layer: sharded over the ranks holding the same experts.
      auto [dense, experts] = split_routed_experts(named);
      choice.expert_shard_group = groups.expert_dp.get();
      sharded = make_expert_split_fully_sharded(
          make_fully_sharded(dense, config.optimizer, *choice.shard_group, nullptr, norm_groups, offload),
          make_fully_sharded(experts, config.optimizer, *groups.expert_dp, nullptr, expert_norm, offload));
    } else {
      sharded = make_fully_sharded(named, config.optimizer, *choice.shard_group,
                                   hybrid ? groups.dp_replicate.get() : nullptr, norm_groups, offload);
    }
    choice.zero3 = sharded.get();
    model->set_parameter_residency(choice.zero3);
    if (hybrid) {
      core::info0("zero3: hybrid sharding, parameters sharded over ", groups.dp_shard->size(), " ranks (",
                  groups.dp_shard->name(), "), replicated over ", groups.dp_replicate->size(), " (",
                  groups.dp_replicate->name(), ")");
    }
    choice.optimizer = std::move(sharded);
  } else if (groups.expert_dp) {
    // Expert parallelism: the routed experts' gradients are summed (and ZeRO shards them) over the
    // ranks holding the same experts, expert-dp; everything else over the replicas.
    auto [dense, experts] = split_routed_experts(named);
    // A pipeline stage of dense layers only holds no experts (dense first layers, interleaved MoE).
    choice.optimizer = make_expert_split_optimizer(
        data_parallel_optimizer(par, config, dense, replicas, norm_groups),
        experts.empty() ? nullptr : data_parallel_optimizer(par, config, experts, *groups.expert_dp, expert_norm),
        expert_norm);
  } else {
    choice.optimizer = data_parallel_optimizer(par, config, named, replicas, norm_groups);
  }
  return choice;
}

}  // namespace cpt::exec
