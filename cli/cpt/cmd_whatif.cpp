// cpt whatif: a plan (or a model and workload) under hardware or workload you do not have.
//   cpt whatif PLAN.json [changes] [--search]   the plan re-evaluated (or re-searched) under changes
//   cpt whatif ... --sweep KEY=v1,v2,... [--gpu a,b] [--svg FILE]   the best plan for each value
// Changes: --gpu, --gpus, --gpus-per-node, --nic-gbps, --hbm-GiB, --seq-len, --global-batch.
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/numeric_flags.h"
#include "cli/cpt/commands.h"
#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "cli/cpt/recipe_flag.h"
#include "cli/cpt/runtime_flag.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/svg_chart.h"
#include "core/text_table.h"
#include "costmodel/error_band.h"
#include "costmodel/estimate_json.h"
#include "costmodel/runtime_profile.h"
#include "planner/what_if.h"
#include "spec/model_io.h"
#include "spec/plan.h"

namespace cpt::cli {
namespace {

using core::str_cat;

struct WhatIfOptions {
  std::string plan, model, gpu, sweep, svg;
  int gpus = 0, gpus_per_node = 0, seq_len = 0, global_batch = 0;
  double nic_gbps = 0, hbm_gib = 0, price = 0;
  std::int64_t tokens = 0;
  std::string runtime;         // empty: the plan's (megatron without a plan)
  std::string config;          // TRAIN.json: the continual recipe priced after the change (default: the plan's)
  std::string moe_dispatcher;  // empty: the plan's
  bool search = false;
  bool json = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// `priced`: the options the plan was priced with (the defaults without a plan), the recipe applied.
using Sweep = std::pair<planner::SweepKey, std::vector<double>>;  // planner::parse_sweep's

void run_sweep(const WhatIfOptions& o, const Sweep& sweep, const spec::ModelSpec& model, const spec::ClusterSpec& base,
               int seq_len, int global_batch, const cost::CostModelOptions& priced) {
  const auto& [key, values] = sweep;
  std::vector<std::string> gpus = o.gpu.empty() ? std::vector<std::string>{base.gpu().name} : split(o.gpu);
  planner::SearchOptions so;
  so.seq_len = seq_len;
  so.global_batch = global_batch;
  so.tokens = o.tokens;
  so.price_per_gpu_hour = o.price;
  so.runtime = runtime_named(o.runtime);
  so.cost = priced;
  const auto points = planner::sweep(model, base, gpus, key, values, so, spec::HardwareCatalog::builtin());
  if (o.json) {
    core::Json arr = core::Json::array();
    for (const auto& pt : points) {
      core::Json j = {{"gpu", pt.gpu}, {planner::to_string(key), pt.value}, {"gpus", pt.gpus}};
      if (pt.best) {
        j["config"] = config_summary(pt.best->config);
        j["estimate"] = cost::evaluation_to_json(pt.best->estimate);
        if (o.tokens > 0) j["hours"] = pt.hours;
        if (o.price > 0) j["cost_usd"] = pt.cost_usd;
      } else {
        j["estimate"] = {{"feasible", false}};
      }
      arr.push_back(j);
    }
    print_json({{"sweep", planner::to_string(key)}, {"points", arr}});
  } else {
    using core::Align;
    core::TextTable t({"gpu", planner::to_string(key), "GPUs", "best plan", "step s", "tokens/s/GPU", "MFU", "peak GiB",
                       "hours", "USD"},
                      {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kRight, Align::kRight,
                       Align::kRight, Align::kRight, Align::kRight, Align::kRight});
    // A swept value as typed: whole numbers (GPUs, Gb/s) without decimals, fractions with two.
    const auto swept = [](double v) { return fixed(v, v == std::floor(v) ? 0 : 2); };
    for (const auto& pt : points) {
      if (!pt.best) {
        t.add_row({pt.gpu, swept(pt.value), std::to_string(pt.gpus), "nothing fits", "-", "-", "-", "-", "-", "-"});
        continue;
      }
      const auto& e = pt.best->estimate;
      t.add_row({pt.gpu, swept(pt.value), std::to_string(pt.gpus), config_summary(pt.best->config),
                 fixed(e.time.total().value(), 3), fixed(e.tokens_per_s_per_gpu, 0), fixed(100 * e.mfu, 1) + "%",
                 fixed(core::to_gibibytes(e.peak_memory().total()), 1), o.tokens > 0 ? fixed(pt.hours, 1) : "-",
                 o.price > 0 ? fixed(pt.cost_usd, 0) : "-"});
    }
    std::cout << str_cat(model.name, ", global batch ", global_batch, " x ", seq_len, ": best plan per ",
                         planner::to_string(key), "\n\n")
              << t.render();
  }
  if (!o.svg.empty()) {
    std::vector<core::ChartPanel> panels = {{"tokens/s per GPU", {}}, {"MFU %", {}}, {"step time s", {}}};
    for (const auto& gpu : gpus) {
      const auto name = spec::HardwareCatalog::builtin().gpu(gpu, "--gpu").name;
      core::ChartSeries a{name, {}, {}}, b{name, {}, {}}, c{name, {}, {}};
      for (const auto& pt : points) {
        if (pt.gpu != name || !pt.best) continue;
        a.x.push_back(pt.value);
        a.y.push_back(pt.best->estimate.tokens_per_s_per_gpu);
        b.x.push_back(pt.value);
        b.y.push_back(100 * pt.best->estimate.mfu);
        c.x.push_back(pt.value);
        c.y.push_back(pt.best->estimate.time.total().value());
      }
      panels[0].series.push_back(a);
      panels[1].series.push_back(b);
      panels[2].series.push_back(c);
    }
    core::write_file_atomic(o.svg, core::line_chart_svg(str_cat(model.name, ": best plan vs ", planner::to_string(key)),
                                                        planner::to_string(key), panels));
    if (!o.json) std::cout << "wrote " << o.svg << "\n";
  }
}

// The plan before and after the changes: "after" keeps the plan's configuration (dp following the
// GPU count) unless --search asks for a new one or the configuration no longer exists.
struct WhatIf {
  spec::ClusterSpec cluster;              // after
  cost::CostModelOptions before_options;  // as the plan was priced
  cost::CostModelOptions after_options;   // the same, or under --runtime and --config
  cost::Evaluation before;
  cost::Evaluation after;
  spec::ParallelConfig after_config;
  std::string how;
};

planner::HardwareChange change_of(const WhatIfOptions& o) {
  planner::HardwareChange change;
  if (!o.gpu.empty()) change.gpu = o.gpu;
  if (o.gpus > 0) change.gpus = o.gpus;
  if (o.gpus_per_node > 0) change.gpus_per_node = o.gpus_per_node;
  if (o.nic_gbps > 0) change.nic_gbit_per_s = o.nic_gbps;
  if (o.hbm_gib > 0) change.hbm_gib = o.hbm_gib;
  return change;
}

WhatIf what_if(const WhatIfOptions& o, const spec::Plan& plan, int seq_len, int global_batch) {
  const auto cluster = planner::apply_change(plan.cluster, change_of(o), spec::HardwareCatalog::builtin());
  const cost::CostModelOptions priced = plan.predicted ? cost::options_of(*plan.predicted) : cost::CostModelOptions{};
  const auto runtime = runtime_named(o.runtime);
  cost::CostModelOptions after_options =
      with_recipe(runtime ? cost::for_runtime(priced, *runtime) : priced, read_recipe(o.config));
  if (!o.moe_dispatcher.empty()) {
    after_options.moe_dispatcher = moe_dispatcher_named(o.moe_dispatcher, after_options.runtime);
  }
  auto before = cost::evaluate(plan.model, plan.cluster, plan.parallel, plan.workload.seq_len, priced);
  std::optional<spec::ParallelConfig> config = planner::rescale(plan.parallel, cluster.num_gpus);
  if (config) config->global_batch = global_batch;
  if (config && !o.search) {
    auto after = cost::evaluate(plan.model, cluster, *config, seq_len, after_options);
    const auto* infeasible = std::get_if<cost::Infeasible>(&after);
    if (infeasible == nullptr || infeasible->reason != cost::InfeasibleReason::kInvalidConfig) {
      return {cluster,
              priced,
              after_options,
              std::move(before),
              std::move(after),
              *config,
              "the plan's configuration (dp follows the GPU count)"};
    }
  }
  planner::SearchOptions so;
  so.seq_len = seq_len;
  so.global_batch = global_batch;
  so.top_k = 1;
  so.cost = after_options;
  const auto r = planner::search(plan.model, cluster, so);
  if (r.top.empty()) throw core::RuntimeError("whatif: no configuration fits under the changes");
  return {cluster,
          priced,
          after_options,
          std::move(before),
          cost::Evaluation(r.top.front().estimate),
          r.top.front().config,
          "the best plan found by a new search"};
}

void print_what_if_json(const WhatIf& w) {
  const auto* after = std::get_if<cost::Estimate>(&w.after);
  print_json(
      {{"before_runtime", spec::to_string(w.before_options.runtime)},
       {"after_runtime", spec::to_string(w.after_options.runtime)},
       {"before_moe_dispatcher", spec::to_string(w.before_options.moe_dispatcher)},
       {"after_moe_dispatcher", spec::to_string(w.after_options.moe_dispatcher)},
       {"before_recipe", describe_recipe(w.before_options)},
       {"after_recipe", describe_recipe(w.after_options)},
       {"before", cost::evaluation_to_json(w.before)},
       {"after", cost::evaluation_to_json(w.after)},
       {"after_step_time_band_s",
        after != nullptr ? cost::step_time_band_to_json(after->time.total(), w.after_options.runtime, w.cluster.gpu())
                         : core::Json()},
       {"after_config", config_summary(w.after_config)},
       {"after_is", w.how}});
}

void print_what_if_table(const WhatIf& w, const spec::Plan& plan) {
  std::cout << str_cat("before: ", plan.cluster.num_gpus, " x ", plan.cluster.gpu().name, ", ",
                       config_summary(plan.parallel), ", runtime ", spec::to_string(w.before_options.runtime),
                       ", continual recipe: ", describe_recipe(w.before_options), "\nafter:  ", w.cluster.num_gpus,
                       " x ", w.cluster.gpu().name, ", ", config_summary(w.after_config), ", runtime ",
                       spec::to_string(w.after_options.runtime),
                       ", continual recipe: ", describe_recipe(w.after_options), " (", w.how, ")\n\n");
  auto value = [](const cost::Evaluation& ev, auto get) -> std::string {
    if (const auto* e = std::get_if<cost::Estimate>(&ev)) return get(*e);
    return "infeasible";
  };
  using core::Align;
  core::TextTable t({"", "before", "after"}, {Align::kLeft, Align::kRight, Align::kRight});
  auto row = [&](const char* name, auto get) { t.add_row({name, value(w.before, get), value(w.after, get)}); };
  row("step time s", [](const cost::Estimate& e) { return fixed(e.time.total().value(), 3); });
  row("tokens/s per GPU", [](const cost::Estimate& e) { return fixed(e.tokens_per_s_per_gpu, 0); });
  row("MFU", [](const cost::Estimate& e) { return fixed(100 * e.mfu, 1) + "%"; });
  row("peak GiB", [](const cost::Estimate& e) { return fixed(core::to_gibibytes(e.peak_memory().total()), 1); });
  // Every part of the step either side spends time on (the rows sum to the step time), compute
  // and the data-parallel term always.
  using Part = core::Seconds cost::StepTimeBreakdown::*;
  const std::pair<const char*, Part> parts[] = {
      {"  compute s", &cost::StepTimeBreakdown::compute},     {"  recompute s", &cost::StepTimeBreakdown::recompute},
      {"  tp_comm s", &cost::StepTimeBreakdown::tp_comm},     {"  cp_comm s", &cost::StepTimeBreakdown::cp_comm},
      {"  ep_comm s", &cost::StepTimeBreakdown::ep_comm},     {"  pp_comm s", &cost::StepTimeBreakdown::pp_comm},
      {"  pp_bubble s", &cost::StepTimeBreakdown::pp_bubble}, {"  dp_comm s", &cost::StepTimeBreakdown::dp_comm},
      {"  optimizer s", &cost::StepTimeBreakdown::optimizer}, {"  continual s", &cost::StepTimeBreakdown::continual},
      {"  other s", &cost::StepTimeBreakdown::other}};
  const auto spends = [&](Part part) {
    for (const auto* ev : {&w.before, &w.after}) {
      if (const auto* e = std::get_if<cost::Estimate>(ev); e != nullptr && (e->time.*part).value() > 0) return true;
    }
    return false;
  };
  for (const auto& [name, part] : parts) {
    const bool always = part == &cost::StepTimeBreakdown::compute || part == &cost::StepTimeBreakdown::dp_comm;
    if (always || spends(part)) row(name, [part](const cost::Estimate& e) { return fixed((e.time.*part).value(), 3); });
  }
  if (plan.model.moe.present() && w.before_options.moe_dispatcher != w.after_options.moe_dispatcher) {
    t.add_row({"  token dispatcher", spec::to_string(w.before_options.moe_dispatcher),
               spec::to_string(w.after_options.moe_dispatcher)});
  }
  std::cout << t.render();
  if (const auto* inf = std::get_if<cost::Infeasible>(&w.after)) std::cout << "after: " << inf->detail << "\n";
  if (const auto* e = std::get_if<cost::Estimate>(&w.after)) {
    std::cout << "after, step time: " << cost::describe_band(e->time.total(), w.after_options.runtime, w.cluster.gpu())
              << "\n";
  }
}

void run(const WhatIfOptions& o) {
  if (!o.svg.empty() && o.sweep.empty()) {
    throw core::ConfigError("--svg: a chart needs --sweep KEY=v1,v2,... (one plan has no curve to draw)");
  }
  std::optional<spec::Plan> plan;
  if (!o.plan.empty()) plan = spec::load_plan(o.plan);
  // A sweep over the GPU count needs no --gpus (its first value sizes the base cluster).
  std::optional<Sweep> sweep;
  if (!o.sweep.empty()) sweep = planner::parse_sweep(o.sweep);
  const bool sweeps_gpus = sweep && sweep->first == planner::SweepKey::kGpus;
  const int gpus = o.gpus > 0 ? o.gpus : sweeps_gpus ? static_cast<int>(sweep->second.front()) : 0;
  if (!plan && (o.model.empty() || o.gpu.empty() || gpus < 1 || o.seq_len < 1 || o.global_batch < 1)) {
    throw core::ConfigError(
        "whatif: expected a plan file, or --model, --gpu, --gpus, --global-batch and --seq-len (with --sweep)");
  }
  const int seq_len = o.seq_len > 0 ? o.seq_len : plan->workload.seq_len;
  const int global_batch = o.global_batch > 0 ? o.global_batch : plan->parallel.global_batch;
  if (!o.sweep.empty()) {
    const auto model = plan ? plan->model : spec::load_model(o.model, "--model");
    spec::ClusterSpec base = plan ? plan->cluster : cluster_for_gpu_flag(split(o.gpu).front(), gpus, "--gpu");
    if (plan && o.gpus > 0) {
      planner::HardwareChange more;
      more.gpus = o.gpus;
      base = planner::apply_change(base, more, spec::HardwareCatalog::builtin());
    }
    cost::CostModelOptions priced =
        plan && plan->predicted ? cost::options_of(*plan->predicted) : cost::CostModelOptions{};
    if (!o.moe_dispatcher.empty()) {
      priced.moe_dispatcher = moe_dispatcher_named(o.moe_dispatcher, runtime_named(o.runtime).value_or(priced.runtime));
    }
    run_sweep(o, *sweep, model, base, seq_len, global_batch, with_recipe(priced, read_recipe(o.config)));
    return;
  }
  if (!plan) throw core::ConfigError("whatif: without --sweep, expected a plan file");
  const WhatIf w = what_if(o, *plan, seq_len, global_batch);
  if (o.json) {
    print_what_if_json(w);
  } else {
    print_what_if_table(w, *plan);
  }
}

}  // namespace

void register_whatif_command(CLI::App& app) {
  auto o = std::make_shared<WhatIfOptions>();
  auto* cmd = app.add_subcommand("whatif", "Re-evaluate a plan under other hardware or workload, or sweep");
  cmd->add_option("PLAN", o->plan, "plan.json (from cpt plan --out)");
  cmd->add_option("--model", o->model, "Model (without a plan)");
  cmd->add_option("--gpu", o->gpu, "Another GPU profile; with --sweep a comma-separated list");
  cmd->add_option("--gpus", o->gpus, "Total GPUs")->check(cli::positive_number());
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node")->check(cli::positive_number());
  cmd->add_option("--nic-gbps", o->nic_gbps, "NIC bandwidth, Gbit/s per NIC")->check(cli::positive_number());
  cmd->add_option("--hbm-GiB", o->hbm_gib, "GPU memory, GiB")->check(cli::positive_number());
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence")->check(cli::positive_number());
  cmd->add_option("--global-batch", o->global_batch, "Sequences per step")->check(cli::positive_number());
  cmd->add_flag("--search", o->search, "Re-run the search instead of keeping the plan's configuration");
  cmd->add_option("--sweep", o->sweep, "gpus|gpus-per-node|nic-gbps|hbm-GiB|seq-len|global-batch=v1,v2,...");
  cmd->add_option("--tokens", o->tokens, "Token budget (time and cost to train)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--price-per-gpu-hour", o->price, "USD per GPU-hour")->check(CLI::NonNegativeNumber);
  cmd->add_option("--svg", o->svg, "With --sweep: write a chart (tokens/s per GPU, MFU, step time)");
  add_runtime_option(*cmd, o->runtime, "default: the one the plan was priced for (megatron without a plan)");
  add_moe_dispatcher_option(*cmd, o->moe_dispatcher)
      ->description(
          "Mixtures of experts: the token dispatcher after the change, alltoall or flex (DeepEP, HybridEP; Megatron-LM "
          "only); default: the plan's");
  add_recipe_option(*cmd, o->config);
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
