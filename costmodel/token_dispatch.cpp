#include "costmodel/token_dispatch.h"

#include <algorithm>

namespace cpt::cost {

namespace {

// miss(m) of the header: the chance that `held` of the E experts hold none of a token's k.
double miss(int experts, int top_k, double held) {
  double chance = 1;
  for (int i = 0; i < top_k; ++i) {
    const double left = experts - held - i;
    if (left <= 0) return 0;
    chance *= left / (experts - i);
  }
  return chance;
}

}  // namespace

FlexCopies flex_copies(const spec::ExpertSpec& experts, const GroupPlacement& group) {
  const int nodes = std::max(group.nodes, 1);
  const int ranks_per_node = std::max(group.ranks_per_node, 1);
  const double per_rank = static_cast<double>(experts.experts) / std::max(group.size, 1);
  const int k = experts.experts_per_token;
  FlexCopies copies;
  copies.over_network = (nodes - 1) * (1 - miss(experts.experts, k, per_rank * ranks_per_node));
  copies.over_nvlink = static_cast<double>(nodes) * (ranks_per_node - 1) * (1 - miss(experts.experts, k, per_rank));
  return copies;
}

core::Seconds flex_dispatch_time(core::Bytes token_bytes, const spec::ExpertSpec& experts, const GroupPlacement& group,
                                 double network_efficiency) {
  const double bytes = static_cast<double>(token_bytes.value());
  if (group.size <= 1 || bytes <= 0) return core::Seconds(0);
  const FlexCopies copies = flex_copies(experts, group);
  double inside = 0;
  if (group.ranks_per_node > 1) {
    inside = bytes * copies.over_nvlink / (group.intra.bandwidth.value() * network_efficiency) +
             (group.ranks_per_node - 1) * group.intra.latency.value();
  }
  double across = 0;
  if (group.nodes > 1) {
    across = bytes * copies.over_network / (group.inter.bandwidth.value() * network_efficiency) +
             (group.nodes - 1) * group.inter.latency.value();
  }
  return core::Seconds(std::max(inside, across));
}

}  // namespace cpt::cost
