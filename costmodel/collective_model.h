#pragma once
// α–β time of collectives on a placed group (costmodel/topology.h). S is the full buffer in bytes
// (the all-reduced tensor, or the gathered result); B a per-rank, per-direction bandwidth after
// contention, derated by CostModelOptions::network_efficiency; α the latency of one ring step.
//
//   ring all-reduce            2(n−1)/n · S/B + 2(n−1)·α
//   ring all-gather / RS       (n−1)/n · S/B + (n−1)·α
//   tree all-reduce            2·S/B + 2·⌈log2 n⌉·α            (NCCL's tree; wins for small S)
//   two-level (k per node, N nodes): reduce-scatter inside the node, the collective on S/k across
//   nodes in k parallel rings, all-gather inside the node (docs/costmodel-reference.md §2.6)
//   point-to-point             α + S/B
// Textbook forms: Thakur et al. 2005; NCCL's busBW convention; cpt's choices in docs/costmodel.md.

#include "core/units.h"
#include "costmodel/topology.h"

namespace cpt::cost {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll };

// REQUIRES: network_efficiency in (0, 1].
core::Seconds collective_time(Collective kind, core::Bytes bytes, const GroupPlacement& group,
                              double network_efficiency);
core::Seconds p2p_time(core::Bytes bytes, const LinkCost& link, double network_efficiency);

// Σ over the summed links of p2p_time(bytes, link, network_efficiency).
core::Seconds p2p_time(core::Bytes bytes, const LinkSum& links, double network_efficiency);

}  // namespace cpt::cost
