#pragma once
// What-if: the same questions under hardware or workload the user does not have. A plan is
// re-evaluated as it stands (keeping tp, cp, pp; dp follows the GPU count), or the search is re-run;
// a sweep re-runs the search for each value of one parameter and each GPU profile.

#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "spec/hardware_catalog.h"

namespace cpt::planner {

// A change of hardware. Unset fields keep the base cluster's value.
struct HardwareChange {
  std::optional<std::string> gpu{};        // another GPU profile: its default node and fabric
  std::optional<int> gpus{};               // total GPUs (whole nodes, or up to one node)
  std::optional<int> gpus_per_node{};      // node size (NICs scale with it)
  std::optional<double> nic_gbit_per_s{};  // per-NIC rate (the fabric's links follow)
  std::optional<double> hbm_gib{};         // GPU memory
};

// The base cluster with `change` applied. ConfigError naming the flag when the result is invalid.
spec::ClusterSpec apply_change(const spec::ClusterSpec& base, const HardwareChange& change,
                               const spec::HardwareCatalog& catalog);

// `config` on `gpus` GPUs with tp, cp and pp kept and dp = gpus / (tp·cp·pp); std::nullopt when
// that does not divide.
std::optional<spec::ParallelConfig> rescale(const spec::ParallelConfig& config, int gpus);

// Serialized as the flag names: "gpus", "gpus-per-node", "nic-gbps", "hbm-GiB", "seq-len",
// "global-batch". DO NOT CHANGE them.
enum class SweepKey { kGpus, kGpusPerNode, kNicGbps, kHbmGiB, kSeqLen, kGlobalBatch };
// Parses "key=v1,v2,..." (ConfigError naming --sweep).
std::pair<SweepKey, std::vector<double>> parse_sweep(const std::string& text);
std::string to_string(SweepKey k);

struct SweepPoint {
  std::string gpu;     // profile name
  double value = 0;    // the swept value
  int gpus = 0;
  std::optional<Candidate> best;  // nullopt: nothing fits
  double hours = 0;    // time to train the token budget (0 without one)
  double cost_usd = 0; // hours · GPUs · price (0 without a price)
};

// For each GPU profile in `gpus` (catalog names) and each value: apply, search, keep the best.
std::vector<SweepPoint> sweep(const spec::ModelSpec& model, const spec::ClusterSpec& base,
                              const std::vector<std::string>& gpus, SweepKey key, const std::vector<double>& values,
                              const SearchOptions& options, const spec::HardwareCatalog& catalog);

}  // namespace cpt::planner
