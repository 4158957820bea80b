#include "planner/what_if.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::planner {

using core::ConfigError;
using core::str_cat;

spec::ClusterSpec apply_change(const spec::ClusterSpec& base, const HardwareChange& ch,
                               const spec::HardwareCatalog& catalog) {
  // The node first (another GPU brings its default node and fabric; a node size reshapes it), then
  // the GPU count, checked against the final node size.
  spec::ClusterSpec c = base;
  if (ch.gpu) {
    const auto g = catalog.gpu(*ch.gpu, "--gpu");
    c = catalog.cluster_for_gpu(*ch.gpu, catalog.node(g.default_node, "--gpu").gpus_per_node, "--gpu");
  }
  if (ch.gpus_per_node) {
    const int k = *ch.gpus_per_node;
    if (k < 1) throw ConfigError(str_cat("--gpus-per-node: expected >= 1, got ", k));
    // NICs scale with the node, keeping the GPUs per NIC.
    c.node.nics_per_node = std::max(1, c.node.nics_per_node * k / std::max(1, c.node.gpus_per_node));
    c.node.gpus_per_node = k;
  }
  const int gpus = ch.gpus.value_or(base.num_gpus);
  const int per_node = c.node.gpus_per_node;
  if (gpus < 1 || (gpus > per_node && gpus % per_node != 0)) {
    throw ConfigError(str_cat("--gpus: expected whole nodes of ", per_node, " GPUs or at most one node, got ", gpus));
  }
  c.num_gpus = gpus;
  c.num_nodes = std::max(1, (gpus + per_node - 1) / per_node);
  if (ch.nic_gbit_per_s) {
    if (*ch.nic_gbit_per_s <= 0) throw ConfigError(str_cat("--nic-gbps: expected > 0, got ", *ch.nic_gbit_per_s));
    c.node.nic_bandwidth = core::gigabits_per_second(*ch.nic_gbit_per_s);
    c.fabric.link_bandwidth = core::gigabits_per_second(*ch.nic_gbit_per_s);
  }
  if (ch.hbm_gib) {
    if (*ch.hbm_gib <= 0 || *ch.hbm_gib > 1e6) {
      throw ConfigError(str_cat("--hbm-GiB: expected a capacity in (0, 1e6], got ", *ch.hbm_gib));
    }
    c.node.gpu.hbm_capacity = core::gibibytes(*ch.hbm_gib);
  }
  c.name = str_cat(c.gpu().name, "_x", c.num_gpus, "_whatif");
  return c;
}

std::optional<spec::ParallelConfig> rescale(const spec::ParallelConfig& config, int gpus) {
  const int mp = config.tp * config.cp * config.pp;
  if (gpus % mp != 0) return std::nullopt;
  spec::ParallelConfig p = config;
  p.dp = gpus / mp;
  return p;
}

std::string to_string(SweepKey k) {
  switch (k) {
    case SweepKey::kGpus:
      return "gpus";
    case SweepKey::kGpusPerNode:
      return "gpus-per-node";
    case SweepKey::kNicGbps:
      return "nic-gbps";
    case SweepKey::kHbmGiB:
      return "hbm-GiB";
    case SweepKey::kSeqLen:
      return "seq-len";
    case SweepKey::kGlobalBatch:
      return "global-batch";
  }
  return "?";
}

std::pair<SweepKey, std::vector<double>> parse_sweep(const std::string& text) {
  const auto eq = text.find('=');
  const std::vector<SweepKey> keys = {SweepKey::kGpus,   SweepKey::kGpusPerNode, SweepKey::kNicGbps,
                                      SweepKey::kHbmGiB, SweepKey::kSeqLen,      SweepKey::kGlobalBatch};
  std::vector<std::string> names;
  for (auto k : keys) names.push_back(to_string(k));
  if (eq == std::string::npos) {
    throw ConfigError(
        str_cat("--sweep: expected key=v1,v2,... with key one of ", core::join(names, "|"), ", got \"", text, "\""));
  }
  const auto name = text.substr(0, eq);
  std::optional<SweepKey> key;
  for (auto k : keys) {
    if (to_string(k) == name) key = k;
  }
  if (!key) {
    throw ConfigError(str_cat("--sweep: expected key one of ", core::join(names, "|"), ", got \"", name, "\""));
  }
  std::vector<double> values;
  std::stringstream ss(text.substr(eq + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !(v > 0)) throw std::invalid_argument("bad");
      values.push_back(v);
    } catch (const std::exception&) {
      throw ConfigError(str_cat("--sweep: ", name, ": expected positive numbers, got \"", item, "\""));
    }
  }
  if (values.empty()) throw ConfigError(str_cat("--sweep: ", name, ": expected at least one value"));
  return {*key, values};
}

std::vector<SweepPoint> sweep(const spec::ModelSpec& model, const spec::ClusterSpec& base,
                              const std::vector<std::string>& gpus, SweepKey key, const std::vector<double>& values,
                              const SearchOptions& options, const spec::HardwareCatalog& catalog) {
  std::vector<SweepPoint> out;
  for (const auto& gpu : gpus) {
    for (double v : values) {
      HardwareChange ch;
      // Another GPU brings its default node and fabric; the base's own GPU keeps the base cluster.
      if (catalog.gpu(gpu, "--gpu").name != base.gpu().name) ch.gpu = gpu;
      SearchOptions o = options;
      const auto whole = static_cast<int>(std::lround(v));
      switch (key) {
        case SweepKey::kGpus:
          ch.gpus = whole;
          break;
        case SweepKey::kGpusPerNode:
          ch.gpus_per_node = whole;
          break;
        case SweepKey::kNicGbps:
          ch.nic_gbit_per_s = v;
          break;
        case SweepKey::kHbmGiB:
          ch.hbm_gib = v;
          break;
        case SweepKey::kSeqLen:
          o.seq_len = whole;
          break;
        case SweepKey::kGlobalBatch:
          o.global_batch = whole;
          break;
      }
      if (!ch.gpus) ch.gpus = base.num_gpus;
      const spec::ClusterSpec c = apply_change(base, ch, catalog);
      SweepPoint pt{catalog.gpu(gpu, "--gpu").name, v, c.num_gpus, std::nullopt, 0, 0};
      o.top_k = 1;
      const auto r = search(model, c, o);
      if (!r.top.empty()) {
        pt.best = r.top.front();
        if (o.tokens > 0) {
          pt.hours = static_cast<double>(o.tokens) / (pt.best->estimate.tokens_per_s_per_gpu * c.num_gpus) / 3600;
          pt.cost_usd = pt.hours * c.num_gpus * o.price_per_gpu_hour;
        }
      }
      out.push_back(pt);
    }
  }
  return out;
}

}  // namespace cpt::planner
