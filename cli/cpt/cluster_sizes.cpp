#include "cli/cpt/cluster_sizes.h"

#include <algorithm>
#include <sstream>

#include "cli/cpt/local_profile.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "planner/what_if.h"
#include "spec/hardware_catalog.h"

namespace cpt::cli {

using core::str_cat;

// "--gpus 64" or "--gpus 64,128,256": distinct positive counts, in the order given.
std::vector<int> parse_gpu_counts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int n = 0;
    std::size_t used = 0;
    try {
      n = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || n < 1) {
      throw core::ConfigError(
          str_cat("--gpus: expected a positive whole number or a comma-separated list of them, got \"", text, "\""));
    }
    if (std::find(counts.begin(), counts.end(), n) != counts.end()) {
      throw core::ConfigError(str_cat("--gpus: ", n, " is listed twice in \"", text, "\""));
    }
    counts.push_back(n);
  }
  return counts;
}

std::vector<spec::ClusterSpec> clusters_at_sizes(const std::string& gpu, const std::string& gpus,
                                                 const std::string& cluster) {
  const auto& cat = spec::HardwareCatalog::builtin();
  const auto counts = gpus.empty() ? std::vector<int>{} : parse_gpu_counts(gpus);
  std::vector<spec::ClusterSpec> clusters;
  if (!cluster.empty()) {
    const auto base = cat.load_cluster(cluster, "--cluster");
    if (counts.empty()) return {base};
    for (int n : counts) clusters.push_back(planner::apply_change(base, planner::HardwareChange{.gpus = n}, cat));
    return clusters;
  }
  if (!gpu.empty() && counts.empty()) {
    throw core::ConfigError("--gpus: expected the number of GPUs (or a list of sizes) beside --gpu " + gpu +
                            ", got none");
  }
  if (gpu.empty()) {
    throw core::ConfigError(counts.empty() ? "--gpu and --gpus, or --cluster: expected one of them, got neither"
                                           : "--gpu: expected the GPU beside --gpus (or --cluster), got none");
  }
  for (int n : counts) clusters.push_back(cluster_for_gpu_flag(gpu, n, "--gpu"));
  return clusters;
}

}  // namespace cpt::cli
