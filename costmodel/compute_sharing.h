#pragma once
// Ranks that share CPU cores (spec::SharedCores): how fast each pipeline rank computes while only
// some of them do. A profile of such a node was measured with every rank computing at once
// (`cpt calibrate --ranks R`), each rank getting min(1, cores / (R · threads)) of the cores its
// threads want. The operating system shares the cores among the threads that run, so while only k
// ranks of a node compute each gets min(1, cores / (k · threads)): relative to the profile,
//
//     speed(k) = min(1, C / (k·t)) / min(1, C / (R·t)),   R = the node's devices, t = threads each.
//
// Example: 4 ranks of 1 thread on 2 cores (the profile's rates are half a core's); while one
// pipeline stage of 2 ranks computes and the other waits for it, those 2 run at speed 2. Ranks
// waiting in a collective or for a pipeline transfer block (Gloo waits do not spin), so they do not
// count. A pipeline rank stands for its tp · cp · dp executor ranks, which compute together; it
// runs at the speed of its slowest node (the nodes of spec::RankLayout).
#include <span>
#include <vector>

#include "spec/hardware_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

class ComputeSharing {
 public:
  // Inactive (every speed 1) unless cluster.node.shared_cores is set and the node's ranks'
  // threads outnumber its cores.
  ComputeSharing(const spec::ClusterSpec& cluster, const spec::ParallelConfig& parallel);

  [[nodiscard]] bool active() const { return active_; }

  // The speed of pipeline rank `pp_rank` relative to the profile's rates while the pipeline ranks
  // with computing[q] != 0 compute. REQUIRES: computing.size() == pp, computing[pp_rank] != 0.
  [[nodiscard]] double speed(std::span<const char> computing, int pp_rank) const;

 private:
  [[nodiscard]] double share(int computing_devices) const;
  bool active_ = false;
  int cores_ = 0;
  int threads_ = 0;
  double profile_share_ = 1;
  std::vector<std::vector<int>> devices_;  // [node][pp rank]: the pp rank's devices on the node
};

}  // namespace cpt::cost
