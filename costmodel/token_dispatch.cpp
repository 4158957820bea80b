#include "costmodel/token_dispatch.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace cpt::cost {

namespace {

// C(n, r) as a double (exact below 2^53; G and g are at most E).
double choose(int n, int r) {
  if (r < 0 || r > n) return 0;
  double ways = 1;
  for (int i = 0; i < r; ++i) ways = ways * (n - i) / (i + 1);
  return ways;
}

// C(size − overlap, drawn) / C(size, drawn): `drawn` experts uniform in a group of `size` miss the
// `overlap` of them a block holds.
double group_miss(int size, int overlap, int drawn) {
  double chance = 1;
  for (int i = 0; i < drawn; ++i) {
    const double left = size - overlap - i;
    if (left <= 0) return 0;
    chance *= left / (size - i);
  }
  return chance;
}

// The header's miss for the experts [first, first + held): the average over the chosen groups S
// and which k mod g of them give one expert more. `ways[lo][hi]` sums Π group_miss over the
// subsets of the groups the block overlaps with `lo` groups giving ⌊k/g⌋ and `hi` giving ⌈k/g⌉;
// the chosen groups it does not overlap miss with certainty and are counted by C(·,·).
double block_miss(const spec::ExpertSpec& experts, int first, int held) {
  const int groups = experts.expert_groups;
  const int chosen = experts.groups_per_token;
  const int size = experts.experts / groups;
  const int low = experts.experts_per_token / chosen;
  const int extra = experts.experts_per_token % chosen;  // chosen groups giving low + 1
  if (groups == 1) return group_miss(size, held, low);
  std::vector<double> ways(static_cast<std::size_t>(chosen - extra + 1) * static_cast<std::size_t>(extra + 1), 0.0);
  const auto at = [&](int lo, int hi) -> double& {
    return ways[static_cast<std::size_t>(lo) * static_cast<std::size_t>(extra + 1) + static_cast<std::size_t>(hi)];
  };
  at(0, 0) = 1;
  int overlapped = 0;
  for (int group = first / size; group * size < first + held; ++group, ++overlapped) {
    const int overlap = std::min(first + held, (group + 1) * size) - std::max(first, group * size);
    const double miss_low = group_miss(size, overlap, low);
    const double miss_high = group_miss(size, overlap, low + 1);
    for (int lo = chosen - extra; lo >= 0; --lo) {
      for (int hi = extra; hi >= 0; --hi) {
        if (lo > 0) at(lo, hi) += at(lo - 1, hi) * miss_low;
        if (hi > 0) at(lo, hi) += at(lo, hi - 1) * miss_high;
      }
    }
  }
  const int untouched = groups - overlapped;
  double sum = 0;
  for (int lo = 0; lo <= chosen - extra; ++lo) {
    for (int hi = 0; hi <= extra; ++hi) {
      const int rest = chosen - lo - hi;
      sum += at(lo, hi) * choose(untouched, rest) * choose(rest, extra - hi);
    }
  }
  return sum / (choose(groups, chosen) * choose(chosen, extra));
}

// miss averaged over the blocks of `held` experts that tile the E: the overlaps repeat every
// lcm(held, E/G) experts, so one period of blocks is enough; where blocks and groups nest, one block.
double average_miss(const spec::ExpertSpec& experts, int held) {
  const int size = experts.experts / experts.expert_groups;
  if (size % held == 0 || held % size == 0) return block_miss(experts, 0, held);
  const int period = std::lcm(held, size) / held;
  double sum = 0;
  for (int block = 0; block < period; ++block) sum += block_miss(experts, block * held, held);
  return sum / period;
}

}  // namespace

FlexCopies flex_copies(const spec::ExpertSpec& experts, const GroupPlacement& group) {
  const int nodes = std::max(group.nodes, 1);
  const int ranks_per_node = std::max(group.ranks_per_node, 1);
  const int per_rank = experts.experts / std::max(group.size, 1);
  FlexCopies copies;
  copies.over_network = (nodes - 1) * (1 - average_miss(experts, per_rank * ranks_per_node));
  copies.over_nvlink = static_cast<double>(nodes) * (ranks_per_node - 1) * (1 - average_miss(experts, per_rank));
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
