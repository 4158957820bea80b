// cpt compare RUN_DIR [--json] [--log FILE]: the cost model's prediction for the run's plan beside
// what the run measured (OUT/measured.json), with the relative error of each field, appended to a
// local fidelity log. The prediction is re-evaluated in the executor's regime: fp32 on the CPU
// (bf16 on a GPU), and fp32 weights, gradients and AdamW moments for the model state (4 + 4 + 8
// bytes per parameter: the executor keeps fp32 weights also under autocast).
#include <algorithm>
#include <array>
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/recipe_flag.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/estimate_json.h"
#include "costmodel/memory_model.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/measured_run.h"
#include "spec/plan.h"
#include "spec/work_kinds.h"

namespace cpt::cli {

namespace {

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

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct CompareOptions {
  std::string run;
  std::string log;
  std::string cluster;  // evaluate on this profile instead of the plan's
  bool json = false;
};

fs::path default_log() {
  if (const char* p = std::getenv("CPT_FIDELITY_LOG"); p != nullptr && *p != '\0') return p;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / ".cache" / "cpt" / "fidelity.jsonl";
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

void run(const CompareOptions& o) {
  const fs::path dir = o.run;
  auto plan = spec::load_plan(dir / "plan.json");
  if (!o.cluster.empty()) {
    auto c = spec::HardwareCatalog::builtin().load_cluster(o.cluster, "--cluster");
    if (plan.parallel.world_size() > c.node.gpus_per_node * std::max(1, c.num_nodes)) {
      throw core::ConfigError(str_cat("--cluster: ", o.cluster, " has fewer devices than the run's ",
                                      plan.parallel.world_size(), " ranks"));
    }
    c.num_gpus = plan.parallel.world_size();
    c.num_nodes = (c.num_gpus + c.node.gpus_per_node - 1) / c.node.gpus_per_node;
    plan.cluster = c;
  }
  const auto measured = spec::load_measured_run(dir / "measured.json");
  const bool cpu = measured.on_cpu();
  cost::CostModelOptions options;
  options.precision = cpu ? spec::Precision::kFp32 : spec::Precision::kBf16;
  options = cost::as_run_by_cpt_executor(options);
  // The continual recipe the run trained with (its copy of TRAIN.json), as `plan --config` prices it.
  options = with_recipe(options, run_recipe(dir));
  // The run's own gradient bucket (fp32 gradients), where measured.json records it.
  if (measured.dp_bucket_bytes > 0) options.bucket_elements = std::max<std::int64_t>(1, measured.dp_bucket_bytes / 4);
  const auto ev = cost::evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, options);
  const auto* e = std::get_if<cost::Estimate>(&ev);
  if (e == nullptr) {
    throw core::ConfigError(str_cat(dir.string(), "/plan.json: the cost model finds the plan infeasible (",
                                    to_string(std::get<cost::Infeasible>(ev).reason), "), nothing to compare"));
  }
  // The model state in the executor's regime (fp32 weights, gradients, moments), per pipeline rank:
  // the estimate above on the CPU, a second evaluation otherwise.
  std::optional<cost::Evaluation> state_ev;
  if (options.precision != spec::Precision::kFp32) {
    cost::CostModelOptions state_options = options;
    state_options.precision = spec::Precision::kFp32;
    state_ev = cost::evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, state_options);
  }
  const auto* state = state_ev ? std::get_if<cost::Estimate>(&*state_ev) : e;
  Json fields = Json::object();
  auto add = [&](const std::string& name, double predicted, double actual) {
    // rel_err is null where nothing was measured (a part this layout does not have).
    fields[name] = {{"predicted", predicted},
                    {"measured", actual},
                    {"rel_err", actual != 0 ? Json((predicted - actual) / actual) : Json(nullptr)}};
  };
  add("step_time_s", e->time.total().value(), measured.step_time_s);
  add("tokens_per_s_per_gpu", e->tokens_per_s_per_gpu, measured.tokens_per_s_per_gpu);
  // The typical step beside the mean: on a machine whose ranks stall now and then (a stall on one
  // rank stalls every rank it meets) the mean sits above it. The prediction is of the mean.
  add("step_time_median_s", e->time.total().value(), measured.step_time_median_s);
  // The parts of the step: rank 0's seconds blocked in each kind of communication (the executor's
  // timed groups) against the cost model's exposed communication, and the rest against its
  // computation (compute, recompute, optimizer, overlap slowdown).
  {
    const auto& m = measured.ranks.front().step_time_breakdown_s;
    const auto& t = e->time;
    add("tp_comm_s", t.tp_comm.value(), m.tp_comm);
    add("cp_comm_s", t.cp_comm.value(), m.cp_comm);
    add("dp_comm_s", t.dp_comm.value(), m.dp_comm);
    add("ep_comm_s", t.ep_comm.value(), m.ep_comm);
    add("pp_comm_and_bubble_s", (t.pp_comm + t.pp_bubble).value(), m.pp_comm_and_bubble);
    add("compute_and_other_s", (t.compute + t.recompute + t.optimizer + t.continual + t.other).value(),
        m.compute_and_other);
  }
  // Kernels dispatched per step on the critical pipeline rank (the busiest of its tp/cp/dp ranks):
  // what the per-kernel cost is charged for.
  if (measured.ranks.front().dispatch) {
    // The largest count(rank's dispatch) over the ranks of the critical pipeline rank.
    auto busiest = [&](auto&& count) {
      double most = 0;
      for (const auto& r : measured.ranks) {
        if (r.pp == e->critical_pp_rank && r.dispatch) most = std::max(most, static_cast<double>(count(*r.dispatch)));
      }
      return most;
    };
    add("kernels_per_step", e->kernels_per_step,
        busiest([](const spec::MeasuredDispatch& d) { return d.kernels_per_step(); }));
    // Communication calls started per step by group, the count behind each fixed per-call cost.
    const std::array predicted = {e->calls_per_step.tp, e->calls_per_step.cp, e->calls_per_step.dp,
                                  e->calls_per_step.pp, e->calls_per_step.ep};
    const std::array groups = {"tp", "cp", "dp", "pp", "ep"};
    for (std::size_t g = 0; g < groups.size(); ++g) {
      add(str_cat(groups[g], "_calls_per_step"), predicted[g],
          busiest([&](const spec::MeasuredDispatch& d) { return d.calls_per_step[g]; }));
    }
    // Their bytes (timed_communicator.h's convention, the inventory's), the mean over the ranks of
    // the critical pipeline rank: under expert parallelism each rank returns what its experts
    // computed, which routing makes uneven; the cost model prices the balanced rank.
    const std::array predicted_bytes = {e->bytes_per_step.tp, e->bytes_per_step.cp, e->bytes_per_step.dp,
                                        e->bytes_per_step.pp, e->bytes_per_step.ep};
    for (std::size_t g = 0; g < groups.size(); ++g) {
      double bytes = 0, ranks = 0;
      for (const auto& r : measured.ranks) {
        if (r.pp != e->critical_pp_rank || !r.dispatch) continue;
        bytes += static_cast<double>(r.dispatch->bytes_per_step[g]);
        ++ranks;
      }
      add(str_cat(groups[g], "_bytes_per_step"), predicted_bytes[g], ranks > 0 ? bytes / ranks : 0.0);
    }
  }
  // Kinds of work, where the run profiled a step: that step of the critical pipeline rank (its
  // lowest rank) split as measure/op_kind.h splits it, beside the cost model's StepTimeByKind.
  // "other" measured is the rest of that step, which also holds the profiler's own cost (a few µs
  // per event, mostly on the small operators): the kinds add up to the profiled step, which on a
  // noisy machine can differ from the run's mean step by more than that.
  // On the CPU only: on a GPU the host's operator times are launch times, not the kernels'.
  const auto profile = cpu ? find_step_profile(dir, measured, e->critical_pp_rank) : std::nullopt;
  if (profile) {
    const auto& kinds = profile->at("seconds_by_kind");
    const auto predicted = cost::time_by_kind_to_json(e->by_kind);
    double classified = 0;
    for (const auto kind_view : spec::kWorkKinds) {
      const std::string kind(kind_view);
      const double m = kind_view == spec::kKindOther
                           ? std::max(0.0, profile->at("step_time_s").get<double>() - classified)
                           : kinds.value(kind, 0.0);
      classified += m;
      add(str_cat("kind_", kind, "_s"), predicted.at(kind).get<double>(), m);
    }
  }
  if (state != nullptr) {
    // The largest over ranks of each category, against the prediction for that rank's pp coordinate.
    auto add_worst = [&](const std::string& key, auto measured_of, auto predicted_of) {
      double worst_measured = -1, predicted = 0;
      for (const auto& r : measured.ranks) {
        const auto m = static_cast<double>(measured_of(r.memory_bytes));
        if (m <= worst_measured) continue;
        worst_measured = m;
        predicted =
            static_cast<double>(predicted_of(state->memory_per_pp_rank.at(static_cast<std::size_t>(r.pp))).value());
      }
      add(key + "_bytes", predicted, worst_measured);
    };
    add_worst(
        "weights", [](const spec::MeasuredMemory& m) { return m.weights; },
        [](const cost::MemoryBreakdown& b) { return b.weights; });
    add_worst(
        "grads", [](const spec::MeasuredMemory& m) { return m.grads; },
        [](const cost::MemoryBreakdown& b) { return b.grads; });
    add_worst(
        "optimizer", [](const spec::MeasuredMemory& m) { return m.optimizer; },
        [](const cost::MemoryBreakdown& b) { return b.optimizer; });
    // The continual recipe's state, where the run has it.
    if (options.distill_teacher) {
      add_worst(
          "teacher", [](const spec::MeasuredMemory& m) { return m.teacher; },
          [](const cost::MemoryBreakdown& b) { return b.teacher; });
    }
    if (options.ewc) {
      add_worst(
          "ewc", [](const spec::MeasuredMemory& m) { return m.ewc; },
          [](const cost::MemoryBreakdown& b) { return b.ewc; });
    }
  }
  // On a GPU, the caching allocator's peak per rank (measured.json's peak_memory_bytes) is the
  // model state, the activations and the temporaries: the activation peak is measured as the peak
  // less the rank's state, against the cost model's stored activations (bf16 under autocast) and
  // the executor's bf16 copies of the weights (autocast_weight_copy_bytes). The cost model's
  // "other" bytes are left out (the CUDA context is outside the allocator). The rank with the
  // highest peak. (On the CPU the peak is the process's resident set, LibTorch included: not
  // comparable.)
  if (!cpu && state != nullptr) {
    double worst = -1, measured_activations = 0, predicted_activations = 0, predicted_peak = 0;
    for (const auto& r : measured.ranks) {
      const auto& bytes = r.memory_bytes;
      const auto peak = static_cast<double>(bytes.peak);
      if (peak <= worst) continue;
      worst = peak;
      measured_activations = static_cast<double>(bytes.peak - bytes.weights - bytes.grads - bytes.optimizer);
      const auto pp = static_cast<std::size_t>(r.pp);
      const auto& mb = state->memory_per_pp_rank.at(pp);
      const double weight_copies =
          options.precision == spec::Precision::kFp32 ? 0.0 : autocast_weight_copy_bytes(plan, static_cast<int>(pp));
      predicted_activations = static_cast<double>(e->memory_per_pp_rank.at(pp).activations.value()) + weight_copies;
      predicted_peak = static_cast<double>((mb.weights + mb.grads + mb.optimizer).value()) + predicted_activations;
    }
    if (worst > 0) {
      add("activation_peak_bytes", predicted_activations, measured_activations);
      add("peak_memory_bytes", predicted_peak, worst);
    }
  }
  const std::string layout = config_summary(plan.parallel);
  const fs::path log = o.log.empty() ? default_log() : fs::path(o.log);
  if (log.has_parent_path()) fs::create_directories(log.parent_path());
  std::ofstream(log, std::ios::app) << Json{{"run", fs::absolute(dir).string()},
                                            {"model", plan.model.name},
                                            {"cluster", plan.cluster.name},
                                            {"layout", layout},
                                            {"fields", fields}}
                                           .dump()
                                    << "\n";
  if (o.json) {
    print_json({{"run", dir.string()}, {"layout", layout}, {"fields", fields}, {"log", log.string()}});
    return;
  }
  std::cout << str_cat("compare ", dir.string(), ": ", plan.model.name, " on ", plan.cluster.name, ", ", layout, "\n");
  std::cout << "  field                     predicted      measured    error\n";
  for (const auto& [name, f] : fields.items()) {
    std::cout << str_cat("  ", name, std::string(name.size() < 24 ? 24 - name.size() : 1, ' '), " ",
                         fixed(f["predicted"].get<double>(), 6), "  ", fixed(f["measured"].get<double>(), 6), "  ",
                         f["rel_err"].is_null() ? std::string("-") : fixed(100 * f["rel_err"].get<double>(), 1) + "%",
                         "\n");
  }
  if (profile) {
    std::cout << str_cat(
        "  (kind_*: step ", profile->at("step").get<long long>(), " of rank ", profile->at("rank").get<long long>(),
        ", profiled: ", fixed(profile->at("step_time_s").get<double>(), 6), " s with the profiler on)\n");
  }
  std::cout << "  (appended to " << log.string() << ")\n";
}

}  // namespace

void register_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  auto* cmd = app.add_subcommand("compare", "Predicted vs measured for a training run (step time, tokens/s, memory)");
  cmd->add_option("RUN_DIR", o->run, "The --out directory of cpt train")->required();
  cmd->add_option("--log", o->log,
                  "Fidelity log to append to (default: $CPT_FIDELITY_LOG or ~/.cache/cpt/fidelity.jsonl)");
  cmd->add_flag("--json", o->json, "Print {fields: {NAME: {predicted, measured, rel_err}}}");
  cmd->add_option("--cluster", o->cluster, "Predict on this profile (name or file) instead of the plan's");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
