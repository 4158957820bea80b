#pragma once
// What a training run measured (OUT/measured.json): written by the executor's run meter, read by
// `cpt compare`, `cpt calibrate --from-runs` and `cpt run`. Strict both ways, like the plan: every
// key is required where it is defined, unknown keys are errors, and a file of an earlier cpt (no
// schema_version) is refused in one line. Its names are the prediction's where both name the same
// quantity (spec::Prediction, costmodel/estimate_json.h: tp_comm, calls_per_step, weights, ...);
// where the run can only measure a sum of the prediction's parts, the key names the sum
// (pp_comm_and_bubble, compute_and_other). docs/plan_format.md lists the file.
#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cpt::spec {

inline constexpr int kMeasuredRunSchemaVersion = 2;

// A rank's seconds per timed step: blocked in each group's communication (the executor's timed
// communicator: starting an operation and waiting for it), and the rest (computation, the loader,
// the optimizer).
struct MeasuredStepParts {
  double tp_comm = 0;
  double cp_comm = 0;
  double dp_comm = 0;
  double ep_comm = 0;  // the routed tokens' all-to-all (absent from files of runs without experts apart: 0)
  double pp_comm_and_bubble = 0;
  double compute_and_other = 0;
  bool operator==(const MeasuredStepParts&) const = default;
};

// Storage a rank held at the end of the run, by category (executor/measure/storage_bytes.h), and
// its peak: the caching allocator's on a GPU, the process's resident set on the CPU.
struct MeasuredMemory {
  std::int64_t weights = 0;
  std::int64_t grads = 0;
  std::int64_t optimizer = 0;
  std::int64_t optimizer_counters = 0;
  std::int64_t peak = 0;
  std::int64_t teacher = 0;  // KL distillation's teacher weights (0: no teacher; absent in older files)
  std::int64_t ewc = 0;      // EWC's Fisher and anchor (0: no EWC; absent in older files)
  bool operator==(const MeasuredMemory&) const = default;
};

// What a rank dispatched in its first (untimed) step: ATen operators and autograd nodes
// (executor/measure/op_counter.h) and communication calls on two or more ranks, per group.
struct MeasuredDispatch {
  std::int64_t forward_ops = 0;
  std::int64_t backward_nodes = 0;
  std::int64_t nested_ops = 0;
  std::array<std::int64_t, 5> calls_per_step{};  // tp, cp, dp, pp, ep (ep absent from older files: 0)
  // Their bytes (executor/dist/timed_communicator.h's convention, the cost model's); absent from
  // files written before they were counted: 0.
  std::array<std::int64_t, 5> bytes_per_step{};
  // The kernels the cost model charges its per-kernel cost for (costmodel/kernel_dispatch.h).
  [[nodiscard]] std::int64_t kernels_per_step() const { return forward_ops + backward_nodes; }
  bool operator==(const MeasuredDispatch&) const = default;
};

struct MeasuredRank {
  int rank = 0;
  int tp = 0, cp = 0, dp = 0, pp = 0;  // its coordinates (spec::RankLayout)
  MeasuredMemory memory_bytes;
  MeasuredStepParts step_time_breakdown_s;
  std::optional<MeasuredDispatch> dispatch;  // counted on the CPU only
  bool operator==(const MeasuredRank&) const = default;
};

struct MeasuredRun {
  int schema_version = kMeasuredRunSchemaVersion;
  std::string device;  // "cpu", "cuda:0", ...
  int processes = 1;
  std::int64_t steps = 0;          // trained by this invocation
  std::int64_t skipped_steps = 0;  // non-finite updates skipped
  // Over the timed steps (all but the first of the process and a profiled one): the mean, and rank
  // 0's median and nearest-rank 90th percentile.
  double step_time_s = 0;
  double step_time_median_s = 0;
  double step_time_p90_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  // Trained with packing "padded": a step is narrower than the plan's seq_len and its tokens are
  // the real ones, so its time and rate are not the plan's step (compare warns, a fit refuses it).
  bool padded = false;
  double final_loss = 0;
  std::int64_t dp_bucket_bytes = 0;  // the gradient bucket the run used (the cost model prices it)
  std::vector<MeasuredRank> ranks;   // one per process, by rank
  [[nodiscard]] bool on_cpu() const { return device.starts_with("cpu"); }
  bool operator==(const MeasuredRun&) const = default;
};

nlohmann::ordered_json measured_run_to_json(const MeasuredRun& run);
// ConfigError naming `origin` and the key for anything missing, misspelt, out of range or extra.
MeasuredRun measured_run_from_json(const nlohmann::ordered_json& json, const std::string& origin);
MeasuredRun load_measured_run(const std::filesystem::path& path);
// Atomically (core/atomic_file.h).
void save_measured_run(const std::filesystem::path& path, const MeasuredRun& run);

}  // namespace cpt::spec
