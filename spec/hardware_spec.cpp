#include "spec/hardware_spec.h"

#include <algorithm>

#include "core/check.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

std::string to_string(LinkCall c) {
  switch (c) {
    case LinkCall::kAllReduce:
      return "all_reduce";
    case LinkCall::kAllGather:
      return "all_gather";
    case LinkCall::kReduceScatter:
      return "reduce_scatter";
    case LinkCall::kSendRecv:
      return "send_recv";
  }
  return "?";
}

std::optional<LinkCall> link_call_from_string(std::string_view name) {
  for (const auto c : kAllLinkCalls) {
    if (to_string(c) == name) return c;
  }
  return std::nullopt;
}

core::BytesPerSecond ClusterSpec::inter_node_bandwidth_per_gpu() const {
  if (node.gpus_per_node <= 0) return core::BytesPerSecond(0);
  const double per_nic = std::min(node.nic_bandwidth.value(), fabric.link_bandwidth.value());
  return core::BytesPerSecond(per_nic * node.nics_per_node / node.gpus_per_node);
}

ClusterSpec with_slower_network(const ClusterSpec& cluster, double factor) {
  CPT_CHECK(factor > 0, "network slowdown ", factor);
  ClusterSpec c = cluster;
  c.node.nic_bandwidth = core::BytesPerSecond(c.node.nic_bandwidth.value() / factor);
  c.fabric.latency = c.fabric.latency * factor;
  c.fabric.link_bandwidth = core::BytesPerSecond(c.fabric.link_bandwidth.value() / factor);
  return c;
}

ClusterSpec with_slower_links(const ClusterSpec& cluster, double factor) {
  CPT_CHECK(factor > 0, "link slowdown ", factor);
  auto slower = [factor](core::BytesPerSecond bandwidth) { return core::BytesPerSecond(bandwidth.value() / factor); };
  ClusterSpec c = with_slower_network(cluster, factor);
  NodeSpec& node = c.node;
  node.intra_latency = node.intra_latency * factor;
  node.intra_bandwidth = slower(node.intra_bandwidth);
  for (auto& measured : node.intra_measured) {
    if (measured) *measured = MeasuredLink{measured->latency * factor, slower(measured->bandwidth)};
  }
  if (auto& scalar = node.scalar_all_reduce_step_latency) scalar = *scalar * factor;
  return c;
}

std::vector<std::string> find_cluster_errors(const ClusterSpec& c) {
  std::vector<std::string> errors;
  const int g = c.node.gpus_per_node;
  if (c.num_nodes < 1) errors.push_back(str_cat("num_nodes must be >= 1, got ", c.num_nodes));
  if (g < 1) errors.push_back(str_cat("gpus_per_node must be >= 1, got ", g));
  if (c.num_gpus < 1) errors.push_back(str_cat("the number of GPUs must be >= 1, got ", c.num_gpus));
  if (g >= 1 && c.num_nodes >= 1 && c.num_gpus >= 1) {
    const bool whole_nodes = c.num_gpus == c.num_nodes * g;
    const bool part_of_one_node = c.num_nodes == 1 && c.num_gpus <= g;
    if (!whole_nodes && !part_of_one_node) {
      errors.push_back(str_cat("GPUs (", c.num_gpus, ") must fill whole nodes: num_nodes (", c.num_nodes,
                               ") * gpus_per_node (", g, ") = ", c.num_nodes * g, ", or at most one node's worth"));
    }
  }
  if (c.num_nodes > 1 && c.node.nics_per_node < 1) {
    errors.push_back(
        str_cat("a cluster of ", c.num_nodes, " nodes needs nics_per_node >= 1, got ", c.node.nics_per_node));
  }
  if (c.fabric.oversubscription < 1.0) {
    errors.push_back(str_cat("oversubscription must be >= 1, got ", c.fabric.oversubscription));
  }
  return errors;
}

}  // namespace cpt::spec
