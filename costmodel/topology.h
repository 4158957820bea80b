#pragma once
// The cluster as a graph, and where each communication group of a RankLayout lands on it.
//
// Vertices: every GPU, one switch hub per node (NVSwitch, or the PCIe switch), every NIC, the leaf
// switches and one aggregated spine. Edges carry a per-direction bandwidth and a latency:
//   GPU - hub      intra-node bandwidth            GPU - NIC    the NIC's rate (GPUs share NICs
//   NIC - leaf     min(NIC, fabric link)                        when there are fewer NICs)
//   leaf - spine   the leaf's downlink capacity / oversubscription
// Rail-optimised fabrics put NIC i of consecutive nodes on the leaves of rail i; otherwise a leaf
// takes all NICs of consecutive nodes. The graph is built with Boost.Graph; routes between nodes
// follow its breadth-first tree from the spine (a fat tree routes up to the lowest common switch).
//
// Placement: all groups of one axis communicate at once, so every ring step of every group is
// routed and each edge's load counted; a flow gets capacity / load on its tightest edge. Groups
// that span nodes with several ranks per node use the two-level algorithm (inside each node, then k
// parallel rings across nodes), as NCCL does.

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "spec/hardware_spec.h"
#include "spec/rank_layout.h"

namespace cpt::cost {

struct LinkCost {
  core::BytesPerSecond bandwidth;  // per rank, per direction, under the axis's own contention
  core::Seconds latency;           // one step of a ring
};

// Several links summed: α–β is linear in α and 1/B, so a sum of point-to-point times over links
// is one expression of (Σα, Σ1/B) (cost::p2p_time): what lets a search add a pipeline's
// transfers in O(1).
struct LinkSum {
  int links = 0;
  double latency_s = 0;          // Σα
  double inverse_bandwidth = 0;  // Σ 1/B, seconds per byte
  void add(const LinkCost& link) {
    ++links;
    latency_s += link.latency.value();
    inverse_bandwidth += 1.0 / link.bandwidth.value();
  }
};

// How one kind of call departs from the node's intra-node link (spec::NodeSpec::intra_measured):
// its α is `latency` times the link's, its B `bandwidth` times.
struct CallScale {
  double latency = 1;
  double bandwidth = 1;
};
using CallScales = std::array<CallScale, spec::kAllLinkCalls.size()>;  // indexed by spec::LinkCall

struct GroupPlacement {
  int size = 1;              // ranks in a group
  int nodes = 1;             // nodes a group spans
  int ranks_per_node = 1;    // members of a group on one node (the largest)
  LinkCost intra;            // ring inside a node (valid when ranks_per_node > 1)
  LinkCost inter;            // ring across nodes (valid when nodes > 1)
  CallScales intra_scale{};  // per call on `intra` (all 1 unless the node measured its calls)
};

// What a step estimate needs to know of where one layout's groups run: computed once per layout
// (degrees, axis order, hybrid sharding) and memoised by the Topology.
struct LayoutCosts {
  GroupPlacement tp, cp;  // Topology::place of each axis
  // The dp × cp replica groups (Topology::place_replicas; the dp groups when cp = 1): gradients
  // are summed and ZeRO shards spread over them.
  GroupPlacement replicas;
  // The pp groups, placed only when the whole layout fits one node (a CPU or one GPU server: its
  // pp scalars are priced as all-reduces there); size 1 otherwise (routing a 64-deep pp group of
  // 16,384 GPUs per layout would cost the search more than the estimate it serves).
  GroupPlacement pp_in_node;
  // Point-to-point from pipeline rank r to r + 1 (mod pp), between the ranks whose other
  // coordinates are 0 (stage s -> s + 1 runs from pp rank s mod pp to (s + 1) mod pp); empty
  // when pp = 1.
  std::vector<LinkCost> pp_next;
  LinkSum pp_ring;  // the sum of pp_next
  // The expert layers' groups (spec::RankLayout's expert axes): ep's all-to-all, etp's split and
  // expert-dp, over which the routed experts' gradients are summed; size 1 unless the layout was
  // placed with its experts (Topology::layout_costs).
  GroupPlacement ep, etp, expert_replicas;
  int shard_group = 1;                            // spec::RankLayout::zero_shard_group_size
  std::optional<std::string> hybrid_shard_error;  // with hybrid sharding: why it cannot
};

class Topology {
 public:
  explicit Topology(const spec::ClusterSpec& cluster);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  [[nodiscard]] int num_vertices() const;
  // The worst placement over all groups of `axis` (all of them communicating at once). Memoised
  // per (degrees, axis order, axis): a search meets the same layouts many times. Thread-safe.
  [[nodiscard]] GroupPlacement place(const spec::RankLayout& layout, spec::Axis axis) const;
  // The same for the dp × cp replica groups (spec::RankLayout::replica_group), in any axis order.
  [[nodiscard]] GroupPlacement place_replicas(const spec::RankLayout& layout) const;
  // RankLayout::find_hybrid_shard_error: its cp half computed, its dp half (O(world size))
  // memoised by the dp degree and stride. Thread-safe.
  [[nodiscard]] std::optional<std::string> hybrid_shard_error(const spec::RankLayout& layout) const;
  // Every placement a step estimate needs of `layout`, built on first use and kept: one lookup
  // per evaluation (the search evaluates millions). The reference stays valid for the Topology's
  // life. Thread-safe.
  // `experts`: place the expert layers' groups too (a mixture of experts; a dense model's are
  // never used, and placing them costs a search).
  [[nodiscard]] const LayoutCosts& layout_costs(const spec::RankLayout& layout, bool experts = false) const;
  // Point-to-point between two ranks, alone on the fabric (inside a node scaled as the node's
  // measured send/recv says). Memoised per pair. Thread-safe.
  [[nodiscard]] LinkCost p2p(int rank_a, int rank_b, int gpus_per_node) const;

  struct Graph;  // opaque: Boost.Graph stays inside topology.cpp
  struct Cache;

 private:
  // Groups {r0 + a·stride_a + b·stride_b : a < degree_a, b < degree_b} for every r0 whose two
  // coordinates are 0, members ascending; one axis when degree_b = 1.
  [[nodiscard]] GroupPlacement place_groups(int degree_a, int stride_a, int degree_b, int stride_b, int world) const;

  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Cache> cache_;
  CallScales intra_scale_{};  // the node's measured calls against its intra-node link
};

}  // namespace cpt::cost
