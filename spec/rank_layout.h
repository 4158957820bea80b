#pragma once
// RankLayout: global rank <-> (tp, cp, dp, pp) coordinates, and the communication groups of each
// axis. The cost model places each group on the fabric with it, the executor builds its process
// groups from it; both call this one implementation.
//
// Algorithm (Megatron-LM's generate_masked_orthogonal_rank_groups, as a value type):
//   The axes are ordered fastest-varying first, `axis_order` (default tp, cp, dp, pp). With
//   degrees d_0, d_1, d_2, d_3 in that order, the stride of axis k is d_0·…·d_{k−1} and
//       rank = Σ_k coord_k · stride_k,     coord_k = (rank / stride_k) mod d_k.
//   The group of `rank` along axis k is every rank that shares all coordinates but coord_k.
//
// Worked example: tp = 2, dp = 2, pp = 2 (cp = 1), 8 ranks, order (tp, cp, dp, pp):
//   strides tp 1, cp 2, dp 2, pp 4.
//   rank 5 = 1·1 + 0·2 + 1·4, so rank 5 is (tp 1, dp 0, pp 1); rank 6 = 0·1 + 1·2 + 1·4 is (tp 0, dp 1, pp 1).
//   tp groups {0,1} {2,3} {4,5} {6,7}; dp groups {0,2} {1,3} {4,6} {5,7}; pp groups {0,4} {1,5} {2,6} {3,7}.
//   With 4 GPUs per node, nodes are {0..3} and {4..7}: tp and dp groups stay inside a node, pp
//   groups cross nodes.
//
// Hybrid sharding (HSDP, ParallelConfig::hybrid_shard): the dp group is split by node. The shard
// group of a rank is the members of its dp group on its own node; the replicate group is the
// members of its dp group with the same index within their shard groups. In the example above,
// dp groups lie inside one node, so each shard group is the whole dp group and each replicate
// group a single rank.
//
// Expert layers (ParallelConfig::ep, etp; Megatron-Core's parallel folding): pp is the outermost
// axis, so a pipeline stage's S = tp·cp·dp ranks are consecutive, and the expert layers number them
// again as (etp, ep, expert-dp), etp fastest: with l = rank mod S,
//   etp coord = l mod etp,   ep coord = (l / etp) mod ep,   expert-dp coord = l / (etp·ep).
// Worked example: tp 2, dp 4, pp 2 (16 ranks), ep 2, etp 2, so expert-dp = 8 / 4 = 2:
//   stage 0 is ranks 0..7; etp groups {0,1} {2,3} {4,5} {6,7}; ep groups {0,2} {1,3} {4,6} {5,7};
//   expert-dp groups {0,4} {1,5} {2,6} {3,7}; stage 1 (ranks 8..15) likewise. Rank 6 (etp coord 0,
//   ep coord 1, expert-dp coord 1) holds the first half of the FFN width of the experts E/2..E−1
//   (split over etp with rank 7) and sums its gradients with rank 2. Attention keeps the tp groups
//   {0,1} {2,3} ...

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "spec/parallel_config.h"

namespace cpt::spec {

// The axes of the expert layers (the comment above).
enum class ExpertAxis { kEtp, kEp, kExpertDp };

struct RankCoord {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;
  [[nodiscard]] int get(Axis a) const;
  void set(Axis a, int v);
  bool operator==(const RankCoord&) const = default;
};

class RankLayout {
 public:
  // REQUIRES: every degree >= 1, axis_order a permutation, gpus_per_node >= 1.
  RankLayout(const ParallelConfig& config, int gpus_per_node);

  [[nodiscard]] int world_size() const { return world_size_; }
  [[nodiscard]] int gpus_per_node() const { return gpus_per_node_; }
  [[nodiscard]] int degree(Axis a) const { return degree_[index(a)]; }
  [[nodiscard]] int stride(Axis a) const { return stride_[index(a)]; }
  [[nodiscard]] bool hybrid_shard() const { return hybrid_shard_; }

  [[nodiscard]] RankCoord coord_of(int rank) const;
  [[nodiscard]] int rank_of(const RankCoord& coord) const;
  [[nodiscard]] int node_of(int rank) const { return rank / gpus_per_node_; }

  // Ranks that share every coordinate of `rank` but `axis`, ordered by their coordinate on `axis`.
  [[nodiscard]] std::vector<int> group_of(int rank, Axis axis) const;
  // The ranks that hold the same part of the model as `rank` (the same tp and pp coordinates):
  // its dp group times its cp group, ascending. Gradients are summed and ZeRO shards spread over
  // them (Megatron's data-and-context-parallel group); the dp group when cp = 1.
  [[nodiscard]] std::vector<int> replica_group(int rank) const;
  // Every group along `axis`, ordered by their smallest rank; together they partition the ranks.
  [[nodiscard]] std::vector<std::vector<int>> groups(Axis axis) const;
  // Number of distinct nodes the group of `rank` along `axis` spans.
  [[nodiscard]] int nodes_spanned(int rank, Axis axis) const;
  // Largest nodes_spanned over all groups of `axis` (1 = every group is inside a node).
  [[nodiscard]] int max_nodes_spanned(Axis axis) const;

  // The dp part of `rank`'s ZeRO shard group: its dp group, or with hybrid_shard the part of it on
  // its node (zero_shard_group is the whole group, these times the cp group).
  [[nodiscard]] std::vector<int> dp_shard_group(int rank) const;
  // How many ranks ZeRO shards rank 0's parameters over (every rank's group has the size): its
  // dp shard group (dp_shard_group) times the cp degree, whose ranks hold the same parameters.
  [[nodiscard]] int zero_shard_group_size() const;
  // ZeRO-3's shard group of `rank`, ascending: its replica group (dp × cp), or with hybrid_shard
  // the members of it on its node — its dp shard group times its cp group (cp groups lie inside a
  // node under hybrid sharding: find_hybrid_shard_error). Size zero_shard_group_size().
  [[nodiscard]] std::vector<int> zero_shard_group(int rank) const;
  // With hybrid_shard: the members of `rank`'s replica group at its position in their own node's
  // zero shard group (the ranks holding the same shard), ascending; {rank} otherwise.
  [[nodiscard]] std::vector<int> zero_replicate_group(int rank) const;
  // How the dp groups lie on the nodes, in one O(world size) pass without allocation: the members
  // of a dp group are r + i·stride(dp), so their nodes are non-decreasing in i and each group is a
  // sequence of runs of members on one node.
  struct DpNodeRuns {
    bool spans_nodes = false;  // some dp group has members on several nodes
    int rank0_run = 0;         // members of rank 0's dp group on rank 0's node (its HSDP shard group)
    bool uneven = false;       // some group has runs of different lengths; the first case found:
    int uneven_group = 0;      //   the group's first rank,
    int first_node = 0, first_count = 0, other_node = 0, other_count = 0;  // two runs that differ
  };
  [[nodiscard]] DpNodeRuns dp_node_runs() const;
  // Why this layout cannot shard hybridly, or std::nullopt: every cp group must lie inside one
  // node (its ranks shard together: find_hybrid_cp_error), and every dp group must split into
  // shard groups of one size (the same number of its members on each node it touches:
  // find_hybrid_dp_error).
  [[nodiscard]] std::optional<std::string> find_hybrid_shard_error() const;
  // The two halves, each in one pass without allocation until an error is found: O(world size / cp)
  // and O(world size). The dp half depends on the dp degree and stride alone (the cost model
  // memoises it by them).
  [[nodiscard]] std::optional<std::string> find_hybrid_cp_error() const;
  [[nodiscard]] std::optional<std::string> find_hybrid_dp_error() const;

  // The expert layers' axes: degree, stride over the ranks (inside a stage: pp is outermost) and
  // the group of `rank`, ascending.
  [[nodiscard]] int expert_degree(ExpertAxis axis) const;
  [[nodiscard]] int expert_stride(ExpertAxis axis) const;
  [[nodiscard]] std::vector<int> expert_group(int rank, ExpertAxis axis) const;

 private:
  [[nodiscard]] static std::size_t index(Axis a) { return static_cast<std::size_t>(a); }

  std::array<Axis, kNumAxes> order_;
  std::array<int, kNumAxes> degree_{};  // indexed by Axis
  std::array<int, kNumAxes> stride_{};  // indexed by Axis
  int world_size_ = 0;
  int gpus_per_node_ = 1;
  bool hybrid_shard_ = false;
  int ep_ = 1;
  int etp_ = 1;
};

}  // namespace cpt::spec
