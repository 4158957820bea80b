#pragma once
// The clusters `cpt plan` searches, from its --gpu, --gpus and --cluster flags, at one size or
// several ("--gpus 64,128,256").
#include <string>
#include <vector>

#include "spec/hardware_spec.h"

namespace cpt::cli {

// "--gpus 64" or "--gpus 64,128,256": distinct positive counts, in the order given. Throws
// core::ConfigError naming --gpus otherwise.
std::vector<int> parse_gpu_counts(const std::string& text);

// The cluster at each size: --gpu's node and fabric at each --gpus count, or the --cluster file's,
// as it is without --gpus or reshaped by planner::apply_change (whole nodes, or at most one).
std::vector<spec::ClusterSpec> clusters_at_sizes(const std::string& gpu, const std::string& gpus,
                                                 const std::string& cluster);

}  // namespace cpt::cli
