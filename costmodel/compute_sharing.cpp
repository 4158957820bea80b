#include "costmodel/compute_sharing.h"

#include <algorithm>

#include "core/check.h"
#include "spec/rank_layout.h"

namespace cpt::cost {

ComputeSharing::ComputeSharing(const spec::ClusterSpec& cluster, const spec::ParallelConfig& parallel) {
  const auto& shared = cluster.node.shared_cores;
  if (!shared) return;
  cores_ = shared->cores;
  threads_ = shared->threads_per_device;
  const int per_node = cluster.node.gpus_per_node;
  profile_share_ = share(per_node);
  active_ = per_node * threads_ > cores_;
  if (!active_) return;
  const spec::RankLayout layout(parallel, per_node);
  const int nodes = (layout.world_size() + per_node - 1) / per_node;
  devices_.assign(static_cast<std::size_t>(nodes), std::vector<int>(static_cast<std::size_t>(parallel.pp), 0));
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    ++devices_[static_cast<std::size_t>(layout.node_of(rank))][static_cast<std::size_t>(layout.coord_of(rank).pp)];
  }
}

double ComputeSharing::share(int computing_devices) const {
  return std::min(1.0, static_cast<double>(cores_) / (std::max(1, computing_devices) * threads_));
}

double ComputeSharing::speed(std::span<const char> computing, int pp_rank) const {
  if (!active_) return 1.0;
  CPT_CHECK(pp_rank >= 0 && static_cast<std::size_t>(pp_rank) < computing.size() &&
                computing[static_cast<std::size_t>(pp_rank)],
            "ComputeSharing::speed: pipeline rank ", pp_rank, " is not computing");
  double slowest = 0;
  bool found = false;
  for (const auto& node : devices_) {
    CPT_CHECK(node.size() == computing.size(), "ComputeSharing::speed: ", computing.size(),
              " pipeline ranks, the layout has ", node.size());
    if (node[static_cast<std::size_t>(pp_rank)] == 0) continue;
    int busy = 0;
    for (std::size_t q = 0; q < node.size(); ++q) busy += computing[q] ? node[q] : 0;
    const double s = share(busy) / profile_share_;
    slowest = found ? std::min(slowest, s) : s;
    found = true;
  }
  return found ? slowest : 1.0;
}

}  // namespace cpt::cost
