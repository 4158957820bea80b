#pragma once
// Plan: the contract between deciding (plan, whatif) and doing (simulate, train). A plan file is
// self-contained: the model and the cluster are inline, so it can be read without the catalog.
// Its JSON schema is docs/plan_format.md; schema_version goes up on any breaking change.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/runtime.h"
#include "spec/token_dispatcher.h"
#include "spec/stage_partition.h"

namespace cpt::spec {

inline constexpr int kPlanSchemaVersion = 1;

// What the training run is: sequence length and (optionally) the token budget.
struct Workload {
  int seq_len = 0;                // tokens per sequence
  std::int64_t train_tokens = 0;  // token budget of the run; 0 = not given
  bool operator==(const Workload&) const = default;
};

// The cost model's prediction, carried by the plan so that measured runs can be compared with it
// (measured.json uses the same keys). Breakdown names are defined by the cost model.
// Where the step time of a prediction should land, from the validation runs of its runtime on its
// GPU family (cost::error_band): plan.json's "step_time_band_s".
struct StepTimeBand {
  double shortest_s = 0;  // step / (1 + the error's 90th percentile)
  double longest_s = 0;   // step / (1 + its 10th percentile)
  int validation_rows = 0;
  std::string source;
  bool operator==(const StepTimeBand&) const = default;
};

struct Prediction {
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  std::map<std::string, double> step_time_breakdown_s;     // e.g. "compute", "pp_bubble"
  std::map<std::string, double> peak_memory_GiB_per_rank;  // e.g. "weights", "activations"
  // How it was priced (plan.json "priced_as"; plans of earlier cpts lack it: bf16, FlashAttention,
  // Megatron-LM), so that `cpt simulate` replays the plan in the same regime.
  Precision precision = Precision::kBf16;
  bool flash_attention = true;
  bool fused_cross_entropy = false;                             // cost::CostModelOptions::fused_cross_entropy
  TokenDispatcher moe_dispatcher = TokenDispatcher::kAllToAll;  // cost::CostModelOptions::moe_dispatcher
  Runtime runtime = Runtime::kMegatron;                         // the software it was priced for (spec/runtime.h)
  // The continual recipe priced (TRAIN.json's distill and ewc; cost::CostModelOptions).
  bool distill_teacher = false;
  bool ewc = false;
  std::optional<StepTimeBand> step_time_band;  // absent where no validation run covers it
  bool operator==(const Prediction&) const = default;
};

// Who made the plan, from what.
struct Provenance {
  std::string tool_version;       // cpt version + git sha
  std::string created_utc;        // ISO 8601
  std::string model_spec_hash;    // stable_hash_hex of the canonical model JSON
  std::string cluster_spec_hash;  // stable_hash_hex of the canonical cluster JSON
  bool operator==(const Provenance&) const = default;
};

struct Plan {
  int schema_version = kPlanSchemaVersion;
  Provenance provenance;
  ModelSpec model;
  ClusterSpec cluster;
  Workload workload;
  ParallelConfig parallel;
  StagePartition stages = StagePartition::balanced(1, 1, 1);
  std::optional<Prediction> predicted;
  bool operator==(const Plan&) const = default;
};

// Every violated constraint of running `parallel` for `model` on `cluster`: the ParallelConfig
// rules, plus hybrid-shard groups that the node size cannot split evenly.
std::vector<std::string> find_plan_errors(const ModelSpec& model, const ClusterSpec& cluster, const Workload& workload,
                                          const ParallelConfig& parallel);

// Builds a plan for (model, cluster, workload, parallel) with a balanced stage partition and fresh
// provenance. ConfigError listing the first violated constraint when the parallel config does not
// fit the model or the cluster (every factor named).
Plan make_plan(const ModelSpec& model, const ClusterSpec& cluster, const Workload& workload,
               const ParallelConfig& parallel);

core::Json plan_to_json(const Plan& plan);
// `reader` is the root of a plan document; unknown keys, a newer schema_version, inconsistent
// derived values (grad_accum, the stage list) are ConfigErrors naming the JSON path.
Plan plan_from_json(core::JsonObjectReader& reader);

core::Json parallel_config_to_json(const ParallelConfig& c);
ParallelConfig parallel_config_from_json(core::JsonObjectReader& reader);

Plan load_plan(const std::filesystem::path& path);
// Writes atomically (temporary file + rename): a reader never sees a half-written plan.
// RuntimeError when the file cannot be written.
void save_plan(const Plan& plan, const std::filesystem::path& path);

// Hashes of the canonical JSON of a model or a cluster, for provenance.
std::string model_spec_hash(const ModelSpec& model);
std::string cluster_spec_hash(const ClusterSpec& cluster);

}  // namespace cpt::spec
