#include "costmodel/collective_model.h"

#include <algorithm>
#include <cmath>

namespace cpt::cost {

using core::Seconds;

namespace {

// One level: a ring (or a tree for all-reduce) of n ranks over `link`.
double one_level(Collective kind, double S, int n, const LinkCost& link, double eff) {
  if (n <= 1 || S <= 0) return 0.0;
  const double B = link.bandwidth.value() * eff;
  const double a = link.latency.value();
  const double frac = static_cast<double>(n - 1) / n;
  switch (kind) {
    case Collective::kAllReduce: {
      const double ring = 2 * frac * S / B + 2 * (n - 1) * a;
      const double tree = 2 * S / B + 2 * std::ceil(std::log2(n)) * a;
      return std::min(ring, tree);
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return frac * S / B + (n - 1) * a;
  }
  return 0.0;
}

// The intra-node link as `kind` sees it (GroupPlacement::intra_scale; all-to-all unscaled).
LinkCost intra_for(Collective kind, const GroupPlacement& g) {
  spec::LinkCall call = spec::LinkCall::kAllReduce;
  switch (kind) {
    case Collective::kAllReduce:
      break;
    case Collective::kAllGather:
      call = spec::LinkCall::kAllGather;
      break;
    case Collective::kReduceScatter:
      call = spec::LinkCall::kReduceScatter;
      break;
    case Collective::kAllToAll:
      return g.intra;
  }
  const CallScale& s = g.intra_scale[static_cast<std::size_t>(call)];
  return {core::BytesPerSecond(g.intra.bandwidth.value() * s.bandwidth), g.intra.latency * s.latency};
}

}  // namespace

Seconds collective_time(Collective kind, core::Bytes bytes, const GroupPlacement& g, double eff) {
  const double S = static_cast<double>(bytes.value());
  if (g.size <= 1 || S <= 0) return Seconds(0);
  if (g.nodes <= 1) return Seconds(one_level(kind, S, g.size, intra_for(kind, g), eff));
  if (g.ranks_per_node <= 1) return Seconds(one_level(kind, S, g.size, g.inter, eff));
  // Two levels: k ranks in each of N nodes.
  const int k = g.ranks_per_node;
  const int N = g.nodes;
  switch (kind) {
    case Collective::kAllReduce:
      return Seconds(one_level(Collective::kReduceScatter, S, k, intra_for(Collective::kReduceScatter, g), eff) +
                     one_level(Collective::kAllReduce, S / k, N, g.inter, eff) +
                     one_level(Collective::kAllGather, S, k, intra_for(Collective::kAllGather, g), eff));
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return Seconds(one_level(kind, S / k, N, g.inter, eff) + one_level(kind, S, k, intra_for(kind, g), eff));
    case Collective::kAllToAll: {
      // Each rank sends S / (k·N) to every rank: (k − 1) of them over the node's link, S·(N − 1)/N
      // through its NIC, at the same time (NCCL's all-to-all is concurrent sends and receives).
      const double inside = S * (k - 1) / (static_cast<double>(k) * N) / (g.intra.bandwidth.value() * eff) +
                            (k - 1) * g.intra.latency.value();
      const double across = S * (N - 1) / N / (g.inter.bandwidth.value() * eff) + (N - 1) * g.inter.latency.value();
      return Seconds(std::max(inside, across));
    }
  }
  return Seconds(0);
}

Seconds p2p_time(core::Bytes bytes, const LinkCost& link, double eff) {
  if (bytes.value() <= 0) return Seconds(0);
  return Seconds(link.latency.value() + static_cast<double>(bytes.value()) / (link.bandwidth.value() * eff));
}

Seconds p2p_time(core::Bytes bytes, const LinkSum& links, double eff) {
  if (bytes.value() <= 0) return Seconds(0);
  return Seconds(links.latency_s + static_cast<double>(bytes.value()) * links.inverse_bandwidth / eff);
}

}  // namespace cpt::cost
