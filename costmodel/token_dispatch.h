#pragma once
// The flex token dispatcher's traffic (spec::TokenDispatcher::kFlex: DeepEP, HybridEP): each token
// goes once to every node and every rank that holds one of its experts, not once per (token,
// expert) pair as the all-to-all dispatcher sends it (collective_model.h's all-to-all).
//
// Under forced-balanced routing (Megatron-Core's moe_router_force_load_balancing: random router
// logits) a token's k experts are k distinct experts drawn uniformly from E, and a set of m
// experts holds none of them with probability
//   miss(m) = C(E − m, k) / C(E, k) = Π_{i<k} (E − m − i) / (E − i).
// With the E experts spread evenly over an ep group of N nodes × r ranks (E/(N·r) per rank), a
// token is sent from its rank
//   over the network: (N − 1) · (1 − miss(E/N))            once to each other node it needs,
//                                                         landing on the rank of its own local index;
//   over NVLink:      N · (r − 1) · (1 − miss(E/(N·r)))   to each other rank of its own node it
//                                                         needs, and forwarded, in each node it
//                                                         reached, to the ranks there that need it.
// Worked example, Qwen3-30B-A3B (E 128, k 8) on ep 16 = 2 nodes × 8: the all-to-all dispatcher
// sends k·(N−1)/N = 4 copies of a token over the network and k·(r−1)/(N·r) = 3.5 over NVLink; the
// flex dispatcher 1 · (1 − miss(64)) = 0.997 over the network and 2 · 7 · (1 − miss(8)) = 5.77 over
// NVLink. The combine moves the same volumes back (the experts' outputs, summed per rank and node
// before they are sent). By linearity the NVLink count is each rank's expected load: every rank
// forwards for its peers of the same local index as much as they forward for it. Where the
// blocks of experts differ (below), miss is their average.
//
// Group-limited routing (DeepSeek's n_group G, topk_group g; Megatron-Core's
// moe_router_num_groups and moe_router_group_topk) first picks a token's g best groups of E/G
// contiguous experts, scoring a group by the sum of its top k/g, then its k experts inside them.
// With random logits the g groups are uniform among the G, and the top k of the chosen groups
// spread over them as the group scores do: each chosen group gives k/g of the k (⌈k/g⌉ for k mod g
// of them), drawn uniformly inside the group. A block of experts overlapping group j in o_j
// experts then misses a token with probability
//   miss = E_S [ Π_{j∈S} C(E/G − o_j, c_j) / C(E/G, c_j) ]   over the chosen groups S and counts c,
// an average over the C(G, g)·C(g, k mod g) equally likely choices. With g = G nothing is limited:
// ungrouped routing. (The spread of k/g a group is Megatron's rule's when g is well below G, as
// DeepSeek's 4 of 8; as g nears G the real top k spreads less evenly.) DeepSeek-V3 (E 256, k 8, G 8,
// g 4) on ep 64 = 8 nodes × 8, a group per node: a token reaches the other nodes of its 4 groups,
// 7 · (1 − C(7, 4)/C(8, 4)) = 3.5 copies over the network, where ungrouped routing sends 4.6.
// The all-to-all dispatcher's traffic does not change: it sends one copy per (token, expert).

#include "core/units.h"
#include "costmodel/topology.h"
#include "spec/model_spec.h"

namespace cpt::cost {

// Expected copies of one token the flex dispatcher sends from (and, by symmetry, receives at) one
// rank of an ep group placed as `group`.
struct FlexCopies {
  double over_network = 0;  // to other nodes
  double over_nvlink = 0;   // inside nodes, the forwarding included
};
// REQUIRES: experts.present(), as spec::validate checks it (expert_groups divides experts, the
// chosen groups hold the k, k >= groups_per_token); group.size divides experts.experts.
[[nodiscard]] FlexCopies flex_copies(const spec::ExpertSpec& experts, const GroupPlacement& group);

// Seconds of one flex dispatch or combine of `token_bytes` (a rank's tokens, each once) over the ep
// group: the NVLink and network shares at once, each α–β like the all-to-all's (collective_model.h).
// REQUIRES: network_efficiency in (0, 1].
[[nodiscard]] core::Seconds flex_dispatch_time(core::Bytes token_bytes, const spec::ExpertSpec& experts,
                                               const GroupPlacement& group, double network_efficiency);

}  // namespace cpt::cost
