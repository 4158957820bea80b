#include "spec/rank_layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/check.h"
#include "core/str_cat.h"

namespace cpt::spec {

int RankCoord::get(Axis a) const {
  switch (a) {
    case Axis::kTp:
      return tp;
    case Axis::kCp:
      return cp;
    case Axis::kDp:
      return dp;
    case Axis::kPp:
      return pp;
  }
  CPT_UNREACHABLE("axis");
}

void RankCoord::set(Axis a, int v) {
  switch (a) {
    case Axis::kTp:
      tp = v;
      return;
    case Axis::kCp:
      cp = v;
      return;
    case Axis::kDp:
      dp = v;
      return;
    case Axis::kPp:
      pp = v;
      return;
  }
}

RankLayout::RankLayout(const ParallelConfig& config, int gpus_per_node)
    : order_(config.axis_order),
      gpus_per_node_(gpus_per_node),
      hybrid_shard_(config.hybrid_shard),
      ep_(config.ep),
      etp_(config.etp) {
  CPT_CHECK(gpus_per_node >= 1, "gpus_per_node ", gpus_per_node);
  int stride = 1;
  unsigned seen = 0;  // bit per Axis
  for (Axis a : order_) {
    const unsigned bit = 1U << index(a);
    CPT_CHECK((seen & bit) == 0, "axis ", to_string(a), " appears twice in axis_order");
    seen |= bit;
    const int d = config.degree(a);
    CPT_CHECK(d >= 1, "degree of ", to_string(a), " is ", d);
    degree_[index(a)] = d;
    stride_[index(a)] = stride;
    stride *= d;
  }
  world_size_ = stride;
}

RankCoord RankLayout::coord_of(int rank) const {
  CPT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " of ", world_size_);
  RankCoord c;
  for (Axis a : order_) c.set(a, (rank / stride(a)) % degree(a));
  return c;
}

int RankLayout::rank_of(const RankCoord& coord) const {
  int rank = 0;
  for (Axis a : order_) {
    const int v = coord.get(a);
    CPT_CHECK(v >= 0 && v < degree(a), to_string(a), " coordinate ", v, " of ", degree(a));
    rank += v * stride(a);
  }
  return rank;
}

std::vector<int> RankLayout::group_of(int rank, Axis axis) const {
  RankCoord c = coord_of(rank);
  std::vector<int> group;
  group.reserve(static_cast<std::size_t>(degree(axis)));
  for (int i = 0; i < degree(axis); ++i) {
    c.set(axis, i);
    group.push_back(rank_of(c));
  }
  return group;
}

std::vector<int> RankLayout::replica_group(int rank) const {
  RankCoord c = coord_of(rank);
  std::vector<int> group;
  for (int d = 0; d < degree(Axis::kDp); ++d) {
    for (int k = 0; k < degree(Axis::kCp); ++k) {
      c.dp = d;
      c.cp = k;
      group.push_back(rank_of(c));
    }
  }
  std::sort(group.begin(), group.end());
  return group;
}

std::vector<std::vector<int>> RankLayout::groups(Axis axis) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_size_; ++r) {
    if (coord_of(r).get(axis) == 0) out.push_back(group_of(r, axis));
  }
  return out;  // ascending smallest rank: the coordinate-0 member is the smallest of its group
}

int RankLayout::nodes_spanned(int rank, Axis axis) const {
  std::set<int> nodes;
  for (int r : group_of(rank, axis)) nodes.insert(node_of(r));
  return static_cast<int>(nodes.size());
}

int RankLayout::max_nodes_spanned(Axis axis) const {
  int worst = 0;
  for (const auto& g : groups(axis)) worst = std::max(worst, nodes_spanned(g.front(), axis));
  return worst;
}

std::vector<int> RankLayout::dp_shard_group(int rank) const {
  auto group = group_of(rank, Axis::kDp);
  if (!hybrid_shard_) return group;
  const int node = node_of(rank);
  std::erase_if(group, [&](int r) { return node_of(r) != node; });
  return group;
}

int RankLayout::zero_shard_group_size() const {
  return static_cast<int>(dp_shard_group(0).size()) * degree(Axis::kCp);
}

std::vector<int> RankLayout::zero_shard_group(int rank) const {
  auto group = replica_group(rank);
  if (!hybrid_shard_) return group;
  const int node = node_of(rank);
  std::erase_if(group, [&](int r) { return node_of(r) != node; });
  return group;
}

std::vector<int> RankLayout::zero_replicate_group(int rank) const {
  if (!hybrid_shard_) return {rank};
  const auto shard = zero_shard_group(rank);
  const auto pos = std::find(shard.begin(), shard.end(), rank) - shard.begin();
  std::vector<int> out;
  for (int r : replica_group(rank)) {
    const auto other = zero_shard_group(r);
    if (other.size() == shard.size() && other[static_cast<std::size_t>(pos)] == r) out.push_back(r);
  }
  return out;
}

RankLayout::DpNodeRuns RankLayout::dp_node_runs() const {
  const int stride = this->stride(Axis::kDp);
  const int d = degree(Axis::kDp);
  DpNodeRuns out;
  for (int r = 0; r < world_size_; ++r) {
    if ((r / stride) % d != 0) continue;  // r is the first member of its dp group
    const int first_node = node_of(r);
    int first_count = -1;
    int node = first_node;
    int count = 0;
    for (int i = 0; i <= d; ++i) {
      const int n = i < d ? node_of(r + i * stride) : -1;  // -1 closes the last run
      if (n != node) {
        if (first_count < 0) first_count = count;
        if (n >= 0) out.spans_nodes = true;
        if (count != first_count && !out.uneven) {
          out.uneven = true;
          out.uneven_group = r;
          out.first_node = first_node;
          out.first_count = first_count;
          out.other_node = node;
          out.other_count = count;
        }
        node = n;
        count = 0;
      }
      ++count;
    }
    if (r == 0) out.rank0_run = first_count;
  }
  return out;
}

std::optional<std::string> RankLayout::find_hybrid_shard_error() const {
  if (auto e = find_hybrid_cp_error()) return e;
  return find_hybrid_dp_error();
}

std::optional<std::string> RankLayout::find_hybrid_cp_error() const {
  const int d = degree(Axis::kCp), s = stride(Axis::kCp);
  if (d <= 1) return std::nullopt;
  // A cp group's members r0 + i·s ascend, so it lies in one node iff its first and last do.
  for (int r0 = 0; r0 < world_size_; ++r0) {
    if ((r0 / s) % d != 0 || node_of(r0) == node_of(r0 + (d - 1) * s)) continue;
    return core::str_cat("hybrid_shard with cp ", d, " needs every cp group inside one node; cp group of rank ", r0,
                         " spans ", nodes_spanned(r0, Axis::kCp), " nodes");
  }
  return std::nullopt;
}

std::optional<std::string> RankLayout::find_hybrid_dp_error() const {
  const DpNodeRuns runs = dp_node_runs();
  if (!runs.uneven) return std::nullopt;
  return core::str_cat("hybrid_shard needs the same number of dp ranks on every node of a dp group; dp group of rank ",
                       runs.uneven_group, " has ", runs.first_count, " on node ", runs.first_node, " and ",
                       runs.other_count, " on node ", runs.other_node);
}

int RankLayout::expert_degree(ExpertAxis axis) const {
  switch (axis) {
    case ExpertAxis::kEtp:
      return etp_;
    case ExpertAxis::kEp:
      return ep_;
    case ExpertAxis::kExpertDp:
      return world_size_ / degree(Axis::kPp) / (ep_ * etp_);
  }
  return 1;
}

int RankLayout::expert_stride(ExpertAxis axis) const {
  switch (axis) {
    case ExpertAxis::kEtp:
      return 1;
    case ExpertAxis::kEp:
      return etp_;
    case ExpertAxis::kExpertDp:
      return etp_ * ep_;
  }
  return 1;
}

std::vector<int> RankLayout::expert_group(int rank, ExpertAxis axis) const {
  CPT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " of ", world_size_);
  const int degree = expert_degree(axis), stride = expert_stride(axis);
  const int base = rank - ((rank / stride) % degree) * stride;
  std::vector<int> group;
  group.reserve(static_cast<std::size_t>(degree));
  for (int i = 0; i < degree; ++i) group.push_back(base + i * stride);
  return group;
}

}  // namespace cpt::spec
