#include "executor/dist/process_groups.h"

#include <algorithm>

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/dist/c10d_communicator.h"

namespace cpt::exec {

using core::str_cat;

ProcessGroups make_process_groups(const spec::RankLayout& layout, const LaunchInfo& launch,
                                  std::chrono::seconds timeout, bool cuda, bool experts_apart) {
  if (layout.world_size() != launch.world_size) {
    throw core::ConfigError(str_cat(
        "the plan needs ", layout.world_size(), " processes (tp · cp · dp · pp), the launch has ", launch.world_size,
        launch.world_size == 1 ? " (use cpt train --nproc-per-node N, torchrun or srun)" : ""));
  }
  ProcessGroups g;
  g.rank = launch.rank;
  g.coord = layout.coord_of(launch.rank);
  auto& clocks = *g.clocks;
  if (!launch.distributed()) {
    g.world = make_solo_communicator("world");
    g.tp = with_timing(make_solo_communicator("solo"), clocks.tp);
    g.cp = with_timing(make_solo_communicator("solo"), clocks.cp);
    g.dp = with_timing(make_solo_communicator("solo"), clocks.dp);
    g.pp = with_timing(make_solo_communicator("solo"), clocks.pp);
    return g;
  }
  const auto store = JobStore::connect(launch, timeout);
  std::vector<int> all(static_cast<std::size_t>(launch.world_size));
  for (int r = 0; r < launch.world_size; ++r) all[static_cast<std::size_t>(r)] = r;
  const auto nic = gloo_transport_of(launch);
  // The world group carries only CPU tensors (barriers, the run's small bookkeeping): Gloo alone.
  g.world = make_gloo_group(*store, "world", all, launch.rank, timeout, nic);
  // Every other group: Gloo, or on GPUs Gloo for CPU tensors and NCCL for CUDA tensors.
  auto make = [&](const std::string& name, const std::vector<int>& ranks) {
    auto gloo = make_gloo_group(*store, name, ranks, launch.rank, timeout, nic);
    if (!cuda || ranks.size() == 1) return gloo;
    return route_by_device(std::move(gloo), make_nccl_group(*store, name, ranks, launch.rank, timeout));
  };
  auto group = [&](spec::Axis axis, const char* name) {
    const auto ranks = layout.group_of(launch.rank, axis);
    return make(str_cat(name, "/", ranks.front()), ranks);
  };
  g.tp = with_timing(group(spec::Axis::kTp, "tp"), clocks.tp);
  g.cp = with_timing(group(spec::Axis::kCp, "cp"), clocks.cp);
  g.dp = with_timing(group(spec::Axis::kDp, "dp"), clocks.dp);
  g.pp = with_timing(group(spec::Axis::kPp, "pp"), clocks.pp);
  if (layout.degree(spec::Axis::kCp) > 1) {
    const auto replicas = layout.replica_group(launch.rank);
    g.dp_cp = with_timing(make(str_cat("dp_cp/", replicas.front()), replicas), clocks.dp);
  }
  const int ep_degree = layout.expert_degree(spec::ExpertAxis::kEp);
  const int etp_degree = layout.expert_degree(spec::ExpertAxis::kEtp);
  if (experts_apart || ep_degree * etp_degree > 1) {
    const auto ep = layout.expert_group(launch.rank, spec::ExpertAxis::kEp);
    if (ep_degree > 1) g.ep = with_timing(make(str_cat("ep/", ep.front()), ep), clocks.ep);
    if (etp_degree > 1) {
      const auto etp = layout.expert_group(launch.rank, spec::ExpertAxis::kEtp);
      g.etp = with_timing(make(str_cat("etp/", etp.front()), etp), clocks.ep);
    }
    if (ep_degree > 1 && etp_degree > 1) {
      std::vector<int> ep_etp;  // every ep member's etp group: ascending, etp fastest
      for (const int member : ep) {
        for (const int peer : layout.expert_group(member, spec::ExpertAxis::kEtp)) ep_etp.push_back(peer);
      }
      std::sort(ep_etp.begin(), ep_etp.end());
      g.ep_etp = with_timing(make(str_cat("ep_etp/", ep_etp.front()), ep_etp), clocks.ep);
    }
    const auto replicas = layout.expert_group(launch.rank, spec::ExpertAxis::kExpertDp);
    g.expert_dp = with_timing(make(str_cat("expert_dp/", replicas.front()), replicas), clocks.dp);
  }
  // Hybrid sharding: ZeRO-3 shards over the replicas on this node (dp × cp) and replicates across.
  if (layout.hybrid_shard() && launch.world_size > 1) {
    const auto shard = layout.zero_shard_group(launch.rank), replicate = layout.zero_replicate_group(launch.rank);
    if (shard.size() != layout.replica_group(launch.rank).size()) {
      g.dp_shard = with_timing(make(str_cat("dp_shard/", shard.front()), shard), clocks.dp);
      g.dp_replicate = with_timing(make(str_cat("dp_replicate/", replicate.front()), replicate), clocks.dp);
    }
  }
  return g;
}

}  // namespace cpt::exec
