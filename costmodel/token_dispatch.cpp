#include "costmodel/token_dispatch.h"

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>

namespace cpt::cost {

namespace {

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

// C(total − marked, picked − hits) / C(total, picked): the chance that a uniform `picked`-subset
// of `total` items meets `marked` given items in exactly a given `hits` of them. A product of
// `marked` ratios, each at most 1 (no binomial is formed: C(2048, 1024) overflows a double).
double exact_meeting(int total, int picked, int marked, int hits) {
  if (hits > picked || marked - hits > total - picked) return 0;
  double chance = 1;
  for (int i = 0; i < hits; ++i) chance *= static_cast<double>(picked - i) / (total - i);
  for (int i = 0; i < marked - hits; ++i) chance *= static_cast<double>(total - picked - i) / (total - hits - i);
  return chance;
}

// The header's miss for the experts [first, first + held). The block overlaps a run of contiguous
// groups: whole ones inside it, and at most two partial ones at its ends. A chosen group gives at
// least one expert (REQUIRES: k >= g), so a chosen whole group never misses: the block misses only
// when no whole group is chosen, summed over which partial groups are (A) and which of those give
// ⌈k/g⌉ (B).
double block_miss(const spec::ExpertSpec& experts, int first, int held) {
  const int groups = experts.expert_groups;
  const int chosen = experts.groups_per_token;
  const int size = experts.experts / groups;
  const int low = experts.experts_per_token / chosen;
  const int extra = experts.experts_per_token % chosen;  // chosen groups giving low + 1
  // Every group chosen limits nothing: the top k of all E.
  if (groups == chosen) return group_miss(experts.experts, held, experts.experts_per_token);
  const int first_group = first / size;
  const int last_group = (first + held - 1) / size;
  const int overlapped = last_group - first_group + 1;
  struct Partial {
    double miss_low, miss_high;
  };
  std::array<Partial, 2> partial{};  // the first and last groups, where the block holds part of them
  unsigned count = 0;
  for (const int group : {first_group, last_group}) {
    const int overlap = std::min(first + held, (group + 1) * size) - std::max(first, group * size);
    if (overlap < size && (count == 0 || group != first_group)) {
      partial[count++] = {group_miss(size, overlap, low), group_miss(size, overlap, low + 1)};
    }
  }
  double miss = 0;
  for (unsigned in_a = 0; in_a < (1u << count); ++in_a) {
    for (unsigned in_b = in_a;; in_b = (in_b - 1) & in_a) {  // every subset B of A
      double product = 1;
      for (unsigned i = 0; i < count; ++i) {
        if (in_a & (1u << i)) product *= in_b & (1u << i) ? partial[i].miss_high : partial[i].miss_low;
      }
      const int a = std::popcount(in_a);
      const int b = std::popcount(in_b);
      miss += product * exact_meeting(groups, chosen, overlapped, a) * exact_meeting(chosen, extra, a, b);
      if (in_b == 0) break;
    }
  }
  return miss;
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
