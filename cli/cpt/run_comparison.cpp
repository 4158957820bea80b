#include "cli/cpt/run_comparison.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>

#include "cli/cpt/recipe_flag.h"
#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "costmodel/estimate_json.h"
#include "costmodel/memory_model.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/measured_run.h"
#include "spec/work_kinds.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;
using Fields = std::vector<ComparedField>;

// The bf16 copies of the weights that autocast keeps alive at a CUDA rank's peak. Autocast casts
// each fp32 weight a matmul uses once per step (its cast cache; ZeRO-3's gathered weights per use)
// and autograd keeps the copy for backward: 2 bytes per parameter of the pipeline rank's blocks'
// linear layers (per tp rank, unsharded) and of the LM head. The embedding's lookup and the norms
// are not cast.
// Under full recomputation the checkpointed forward casts outside the cache
// (activation_checkpoint.cpp) and each block's copies live only through its own recomputation and
// backward: one block's, not all of them.
double autocast_weight_copy_bytes(const spec::Plan& plan, int pp_rank) {
  const auto& m = plan.model;
  const int tp = plan.parallel.tp;
  const int layers = plan.stages.layers_of_rank(pp_rank);
  const int blocks_alive = plan.parallel.recompute == spec::Recompute::kFull ? std::min(layers, 1) : layers;
  const int last_stage = plan.stages.num_stages() - 1;
  const bool holds_head = plan.stages.pp_rank_of(last_stage) == pp_rank;
  const double head = holds_head ? static_cast<double>(m.tp_padded_vocab(tp)) / tp * m.hidden : 0.0;
  const auto counts = m.param_counts();
  const double cast_per_block = cost::block_params_per_tp(counts, tp) - static_cast<double>(counts.norms_per_layer);
  return 2.0 * (blocks_alive * cast_per_block + head);
}

Json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw core::ConfigError(str_cat(p.string(), ": cannot read (is it a run directory of cpt train?)"));
  const auto j = Json::parse(in, nullptr, false);
  if (j.is_discarded()) throw core::ConfigError(str_cat(p.string(), ": not valid JSON"));
  return j;
}

// The newest profiled step (`cpt train --profile-step`, OUT/profile/step_S.rank_R.ops.json) of the
// lowest rank on pipeline rank `pp_rank`, if the run was profiled.
std::optional<Json> find_step_profile(const fs::path& dir, const spec::MeasuredRun& measured, int pp_rank) {
  const fs::path profile_dir = dir / "profile";
  if (!fs::is_directory(profile_dir)) return std::nullopt;
  std::optional<std::pair<long long, long long>> best;  // (step, -rank)
  fs::path best_path;
  for (const auto& entry : fs::directory_iterator(profile_dir)) {
    long long step = 0, rank = 0;
    const auto name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "step_%lld.rank_%lld.ops.json", &step, &rank) != 2 ||
        name != str_cat("step_", step, ".rank_", rank, ".ops.json")) {
      continue;
    }
    bool on_pp_rank = false;
    for (const auto& r : measured.ranks) on_pp_rank |= r.rank == rank && r.pp == pp_rank;
    if (!on_pp_rank) continue;
    const std::pair<long long, long long> key{step, -rank};
    if (!best || key > *best) {
      best = key;
      best_path = entry.path();
    }
  }
  if (!best) return std::nullopt;
  return read_json(best_path);
}

// The run's plan, on `cluster`'s hardware where one is named.
spec::Plan plan_on(const fs::path& dir, const std::string& cluster) {
  auto plan = spec::load_plan(dir / "plan.json");
  if (cluster.empty()) return plan;
  auto c = spec::HardwareCatalog::builtin().load_cluster(cluster, "--cluster");
  if (plan.parallel.world_size() > c.node.gpus_per_node * std::max(1, c.num_nodes)) {
    throw core::ConfigError(
        str_cat("--cluster: ", cluster, " has fewer devices than the run's ", plan.parallel.world_size(), " ranks"));
  }
  c.num_gpus = plan.parallel.world_size();
  c.num_nodes = (c.num_gpus + c.node.gpus_per_node - 1) / c.node.gpus_per_node;
  plan.cluster = c;
  return plan;
}

// The cost model's view of the run: the step as the executor runs it, and the model state in its
// regime (fp32 weights, gradients and moments; on the CPU the same evaluation; none where the cost
// model finds fp32 state infeasible on the run's GPUs).
struct PricedRun {
  cost::CostModelOptions options;
  cost::Estimate step;
  std::optional<cost::Estimate> state;
};

cost::Estimate estimate_or_refuse(const fs::path& dir, const spec::Plan& plan, const cost::CostModelOptions& options) {
  auto evaluation = cost::evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, options);
  if (auto* e = std::get_if<cost::Estimate>(&evaluation)) return std::move(*e);
  throw core::ConfigError(str_cat((dir / "plan.json").string(), ": the cost model finds the plan infeasible (",
                                  to_string(std::get<cost::Infeasible>(evaluation).reason), "), nothing to compare"));
}

PricedRun price_run(const fs::path& dir, const spec::Plan& plan, const spec::MeasuredRun& measured) {
  cost::CostModelOptions options;
  options.precision = measured.on_cpu() ? spec::Precision::kFp32 : spec::Precision::kBf16;
  options = cost::as_run_by_cpt_executor(options);
  // The continual recipe the run trained with (its copy of TRAIN.json), as `plan --config` prices it.
  options = with_recipe(options, run_recipe(dir));
  // The run's own gradient bucket (fp32 gradients), where measured.json records it.
  if (measured.dp_bucket_bytes > 0) options.bucket_elements = std::max<std::int64_t>(1, measured.dp_bucket_bytes / 4);
  PricedRun priced{options, estimate_or_refuse(dir, plan, options), {}};
  if (options.precision == spec::Precision::kFp32) {
    priced.state = priced.step;
  } else {
    cost::CostModelOptions state_options = options;
    state_options.precision = spec::Precision::kFp32;
    auto state = cost::evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, state_options);
    if (auto* e = std::get_if<cost::Estimate>(&state)) priced.state = std::move(*e);
  }
  return priced;
}

// The step time, tokens/s and the step's parts: rank 0's seconds blocked in each kind of
// communication (the executor's timed groups) against the cost model's exposed communication, and
// the rest against its computation (compute, recompute, optimizer, continual, other).
void add_step_fields(Fields& fields, const cost::Estimate& e, const spec::MeasuredRun& measured) {
  const auto& t = e.time;
  fields.push_back({"step_time_s", t.total().value(), measured.step_time_s});
  fields.push_back({"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu, measured.tokens_per_s_per_gpu});
  // The typical step beside the mean: on a machine whose ranks stall now and then (a stall on one
  // rank stalls every rank it meets) the mean sits above it. The prediction is of the mean.
  fields.push_back({"step_time_median_s", t.total().value(), measured.step_time_median_s});
  const auto& m = measured.ranks.front().step_time_breakdown_s;
  fields.push_back({"tp_comm_s", t.tp_comm.value(), m.tp_comm});
  fields.push_back({"cp_comm_s", t.cp_comm.value(), m.cp_comm});
  fields.push_back({"dp_comm_s", t.dp_comm.value(), m.dp_comm});
  fields.push_back({"ep_comm_s", t.ep_comm.value(), m.ep_comm});
  fields.push_back({"pp_comm_and_bubble_s", (t.pp_comm + t.pp_bubble).value(), m.pp_comm_and_bubble});
  fields.push_back({"compute_and_other_s", (t.compute + t.recompute + t.optimizer + t.continual + t.other).value(),
                    m.compute_and_other});
}

// Kernels dispatched per step on the critical pipeline rank (the busiest of its tp/cp/dp ranks),
// what the per-kernel cost is charged for; communication calls by group, the count behind each
// fixed per-call cost; and their bytes (timed_communicator.h's convention, the inventory's), the
// mean over the ranks of the critical pipeline rank: under expert parallelism each rank returns
// what its experts computed, which routing makes uneven; the cost model prices the balanced rank.
void add_dispatch_fields(Fields& fields, const cost::Estimate& e, const spec::MeasuredRun& measured) {
  if (!measured.ranks.front().dispatch) return;
  auto busiest = [&](auto&& count) {
    double most = 0;
    for (const auto& r : measured.ranks) {
      if (r.pp == e.critical_pp_rank && r.dispatch) most = std::max(most, static_cast<double>(count(*r.dispatch)));
    }
    return most;
  };
  fields.push_back({"kernels_per_step", e.kernels_per_step,
                    busiest([](const spec::MeasuredDispatch& d) { return d.kernels_per_step(); })});
  const std::array calls = {e.calls_per_step.tp, e.calls_per_step.cp, e.calls_per_step.dp, e.calls_per_step.pp,
                            e.calls_per_step.ep};
  const std::array bytes = {e.bytes_per_step.tp, e.bytes_per_step.cp, e.bytes_per_step.dp, e.bytes_per_step.pp,
                            e.bytes_per_step.ep};
  const std::array groups = {"tp", "cp", "dp", "pp", "ep"};
  for (std::size_t g = 0; g < groups.size(); ++g) {
    fields.push_back({str_cat(groups[g], "_calls_per_step"), calls[g],
                      busiest([&](const spec::MeasuredDispatch& d) { return d.calls_per_step[g]; })});
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    double sum = 0, ranks = 0;
    for (const auto& r : measured.ranks) {
      if (r.pp != e.critical_pp_rank || !r.dispatch) continue;
      sum += static_cast<double>(r.dispatch->bytes_per_step[g]);
      ++ranks;
    }
    fields.push_back({str_cat(groups[g], "_bytes_per_step"), bytes[g], ranks > 0 ? sum / ranks : 0.0});
  }
}

// Kinds of work of the profiled step of the critical pipeline rank (its lowest rank), split as
// measure/op_kind.h splits it, beside the cost model's StepTimeByKind. "other" measured is the rest
// of that step, which also holds the profiler's own cost (a few µs per event, mostly on the small
// operators): the kinds add up to the profiled step, which on a noisy machine can differ from the
// run's mean step by more than that.
void add_kind_fields(Fields& fields, const cost::Estimate& e, const Json& profile) {
  const auto& kinds = profile.at("seconds_by_kind");
  const auto predicted = cost::time_by_kind_to_json(e.by_kind);
  double classified = 0;
  for (const auto kind_view : spec::kWorkKinds) {
    const std::string kind(kind_view);
    const double measured = kind_view == spec::kKindOther
                                ? std::max(0.0, profile.at("step_time_s").get<double>() - classified)
                                : kinds.value(kind, 0.0);
    classified += measured;
    fields.push_back({str_cat("kind_", kind, "_s"), predicted.at(kind).get<double>(), measured});
  }
}

// The model state and the recipe's, each the largest over the ranks against the prediction for
// that rank's pipeline coordinate. An offloaded optimizer state is not compared on the CPU: the
// host is the device there, so the run holds it where the cost model prices it away (0).
void add_state_fields(Fields& fields, const PricedRun& priced, const spec::MeasuredRun& measured,
                      const spec::Plan& plan) {
  if (!priced.state) return;
  auto add_worst = [&](const std::string& key, auto measured_of, auto predicted_of) {
    double worst_measured = -1, predicted = 0;
    for (const auto& r : measured.ranks) {
      const auto m = static_cast<double>(measured_of(r.memory_bytes));
      if (m <= worst_measured) continue;
      worst_measured = m;
      const auto& breakdown = priced.state->memory_per_pp_rank.at(static_cast<std::size_t>(r.pp));
      predicted = static_cast<double>(predicted_of(breakdown).value());
    }
    fields.push_back({key + "_bytes", predicted, worst_measured});
  };
  add_worst(
      "weights", [](const spec::MeasuredMemory& m) { return m.weights; },
      [](const cost::MemoryBreakdown& b) { return b.weights; });
  add_worst(
      "grads", [](const spec::MeasuredMemory& m) { return m.grads; },
      [](const cost::MemoryBreakdown& b) { return b.grads; });
  if (!measured.on_cpu() || plan.parallel.offload == spec::Offload::kNone) {
    add_worst(
        "optimizer", [](const spec::MeasuredMemory& m) { return m.optimizer; },
        [](const cost::MemoryBreakdown& b) { return b.optimizer; });
  }
  if (priced.options.distill_teacher) {
    add_worst(
        "teacher", [](const spec::MeasuredMemory& m) { return m.teacher; },
        [](const cost::MemoryBreakdown& b) { return b.teacher; });
  }
  if (priced.options.ewc) {
    add_worst(
        "ewc", [](const spec::MeasuredMemory& m) { return m.ewc; },
        [](const cost::MemoryBreakdown& b) { return b.ewc; });
  }
}

// On a GPU, the caching allocator's peak of the rank with the highest (measured.json's
// peak_memory_bytes): the model state, the activations and the temporaries. The activation peak
// is measured as the peak less the rank's state, against the cost model's stored activations (bf16
// under autocast) and the executor's bf16 copies of the weights (autocast_weight_copy_bytes). The
// cost model's "other" bytes are left out (the CUDA context is outside the allocator). On the CPU
// the peak is the process's resident set, LibTorch included: not comparable.
void add_peak_fields(Fields& fields, const PricedRun& priced, const spec::MeasuredRun& measured,
                     const spec::Plan& plan) {
  if (measured.on_cpu() || !priced.state) return;
  double worst = -1, measured_activations = 0, predicted_activations = 0, predicted_peak = 0;
  for (const auto& r : measured.ranks) {
    const auto& bytes = r.memory_bytes;
    const auto peak = static_cast<double>(bytes.peak);
    if (peak <= worst) continue;
    worst = peak;
    measured_activations = static_cast<double>(bytes.peak - bytes.weights - bytes.grads - bytes.optimizer);
    const auto pp = static_cast<std::size_t>(r.pp);
    const auto& state = priced.state->memory_per_pp_rank.at(pp);
    const double weight_copies = priced.options.precision == spec::Precision::kFp32
                                     ? 0.0
                                     : autocast_weight_copy_bytes(plan, static_cast<int>(pp));
    predicted_activations =
        static_cast<double>(priced.step.memory_per_pp_rank.at(pp).activations.value()) + weight_copies;
    predicted_peak =
        static_cast<double>((state.weights + state.grads + state.optimizer).value()) + predicted_activations;
  }
  if (worst <= 0) return;
  fields.push_back({"activation_peak_bytes", predicted_activations, measured_activations});
  fields.push_back({"peak_memory_bytes", predicted_peak, worst});
}

}  // namespace

std::optional<double> ComparedField::relative_error() const {
  if (measured == 0) return std::nullopt;
  return (predicted - measured) / measured;
}

Json RunComparison::fields_json() const {
  Json out = Json::object();
  for (const auto& f : fields) {
    const auto error = f.relative_error();
    out[f.name] = {{"predicted", f.predicted}, {"measured", f.measured}, {"rel_err", error ? Json(*error) : Json()}};
  }
  return out;
}

RunComparison compare_run(const fs::path& run_dir, const std::string& cluster) {
  RunComparison comparison{plan_on(run_dir, cluster), {}, std::nullopt};
  const auto measured = spec::load_measured_run(run_dir / "measured.json");
  comparison.padded = measured.padded;
  if (measured.padded) {
    core::warn((run_dir / "measured.json").string(), ": trained with packing \"padded\": its steps are narrower ",
               "than the plan's seq_len and count real tokens, so step time and tokens/s are not the plan's step");
  }
  const PricedRun priced = price_run(run_dir, comparison.plan, measured);
  add_step_fields(comparison.fields, priced.step, measured);
  add_dispatch_fields(comparison.fields, priced.step, measured);
  // On the CPU only: on a GPU the host's operator times are launch times, not the kernels'.
  if (measured.on_cpu()) comparison.profile = find_step_profile(run_dir, measured, priced.step.critical_pp_rank);
  if (comparison.profile) add_kind_fields(comparison.fields, priced.step, *comparison.profile);
  add_state_fields(comparison.fields, priced, measured, comparison.plan);
  add_peak_fields(comparison.fields, priced, measured, comparison.plan);
  return comparison;
}

}  // namespace cpt::cli
