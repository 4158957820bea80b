// cpt plan: search the parallel configurations of a model on a cluster (the planner).
// stdout: the ranking table, or with --json the contract of docs/planner.md; --out DIR writes
// plan.json (the best plan, read by simulate/train/run), candidates.csv and report.md.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "cli/cpt/cluster_sizes.h"
#include "cli/cpt/commands.h"
#include "cli/cpt/local_profile.h"
#include "cli/cpt/finish_report.h"
#include "cli/output.h"
#include "cli/cpt/plan_output.h"
#include "cli/cpt/plan_report.h"
#include "cli/cpt/recipe_flag.h"
#include "cli/cpt/runtime_flag.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "costmodel/estimate_json.h"
#include "costmodel/runtime_profile.h"
#include "planner/handoff.h"
#include "planner/planner.h"
#include "planner/refine.h"
#include "planner/what_if.h"
#include "spec/hardware_catalog.h"
#include "spec/model_io.h"
#include "spec/plan.h"

namespace cpt::cli {
namespace {

using core::str_cat;

struct PlanOptions {
  std::string model, gpu, cluster, objective = "throughput", fix, out;
  std::string gpus;  // one count, or several: "64,128,256"
  int threads = 0;
  int global_batch = 0;
  int seq_len = 0;
  std::int64_t tokens = 0;
  int top = 10;
  int refine = 0;
  double price = 0;
  double headroom = 0.10;
  double memory_margin = 0;
  bool flash_attention = true;
  bool fused_cross_entropy = false;
  std::string moe_dispatcher = "alltoall";
  bool for_executor = false;
  std::string runtime;  // empty: megatron (cpt with --for-executor or --gpu local)
  std::string target;   // empty: any; else only what that framework's export runs as planned
  std::string config;   // TRAIN.json: the continual recipe priced
  planner::FailureOptions failures;
  bool json = false;
};

// ", leaving 30% of the HBM free" for a memory margin; empty without one.
std::string margin_text(const PlanOptions& o) {
  if (o.memory_margin <= 0) return "";
  return str_cat(", leaving ", core::fixed(100 * o.memory_margin, 0), "% of the HBM free");
}

// Writes the plan, its exports, candidates.csv and report.md into `dir`; returns the files written.
std::vector<std::string> write_outputs(const std::filesystem::path& dir, const spec::ModelSpec& model,
                                       const spec::ClusterSpec& cluster, const PlanOptions& o,
                                       const planner::PlannerResult& r, const cost::CostModelOptions& priced_with,
                                       const std::string& finish_md) {
  core::create_output_directory(dir);
  std::vector<std::string> written;
  if (!r.top.empty()) {
    spec::Plan plan = spec::make_plan(model, cluster, spec::Workload{o.seq_len, o.tokens}, r.top.front().config);
    plan.predicted = cost::prediction_of(r.top.front().estimate, priced_with, cluster.gpu());
    spec::save_plan(plan, dir / "plan.json");
    written = planner::write_handoff(plan, dir);
    written.insert(written.begin(), "plan.json");
  }
  core::write_file_atomic(dir / "candidates.csv", candidates_csv(r));
  core::write_file_atomic(
      dir / "report.md",
      report_md(model, cluster, PlanReportFacts{o.global_batch, o.seq_len, o.objective, margin_text(o)}, r, priced_with,
                finish_md));
  written.insert(written.begin() + (r.top.empty() ? 0 : 1), {"candidates.csv", "report.md"});
  return written;
}

planner::Objective objective_of(const std::string& s) {
  if (s == "throughput") return planner::Objective::kThroughput;
  if (s == "time") return planner::Objective::kTime;
  if (s == "cost") return planner::Objective::kCost;
  if (s == "time-to-train") return planner::Objective::kTimeToTrain;
  return planner::Objective::kHeadroom;
}

// The search's options from the flags (TRAIN.json's recipe, the runtime, this machine's regime).
planner::SearchOptions search_options(const PlanOptions& o, const std::optional<spec::TrainConfig>& recipe) {
  planner::SearchOptions so;
  // This machine's CPU trains in fp32 (the executor's regime there).
  if (o.gpu == "local") {
    so.cost.precision = spec::Precision::kFp32;
    so.cost = cost::as_run_by_cpt_executor(so.cost);  // the executor runs here
  }
  so.global_batch = o.global_batch;
  so.seq_len = o.seq_len;
  so.tokens = o.tokens;
  so.objective = objective_of(o.objective);
  so.price_per_gpu_hour = o.price;
  so.headroom = o.headroom;
  so.memory_margin = o.memory_margin;
  so.top_k = o.top;
  so.fixed = planner::parse_fixed(o.fix);
  so.cost.flash_attention = o.flash_attention;
  so.cost.fused_cross_entropy = o.fused_cross_entropy;
  so.cost = with_recipe(so.cost, recipe);
  so.recipe = recipe;
  so.failures = o.failures;
  so.threads = o.threads;
  // --target cpt is --for-executor; another target keeps what its export runs, priced for it
  // unless --runtime says otherwise.
  const bool for_executor = o.for_executor || o.target == "cpt";
  so.executor_only = for_executor;
  so.runtime = runtime_named(o.runtime);
  if (!o.target.empty() && !for_executor) {
    so.target = runtime_named(o.target);
    if (!so.runtime) so.runtime = so.target;
  }
  if ((for_executor || o.gpu == "local") && so.runtime && *so.runtime != spec::Runtime::kCpt) {
    throw core::ConfigError(str_cat("--runtime: ", o.runtime, " does not run ",
                                    for_executor ? "--for-executor plans" : "on --gpu local", "; cpt's executor does"));
  }
  if (o.gpu == "local") so.runtime.reset();  // priced as the executor runs here (above)
  const bool executor_priced = for_executor || o.gpu == "local";
  // Priced for so.runtime and kept to what so.target runs: flex must suit both.
  for (const auto runtime : {executor_priced ? spec::Runtime::kCpt : so.runtime.value_or(spec::Runtime::kMegatron),
                             so.target.value_or(spec::Runtime::kMegatron)}) {
    so.cost.moe_dispatcher = moe_dispatcher_named(o.moe_dispatcher, runtime);
  }
  return so;
}

// What finishing the budget takes with the best plan, as text lines starting with `indent` after
// the first; empty without a budget or a plan.
std::string finish_text(const PlanOptions& o, const planner::PlannerResult& r, const planner::FinishInputs& in,
                        const std::string& indent) {
  if (o.tokens <= 0 || r.top.empty()) return "";
  const auto& best = r.top.front();
  const auto t =
      planner::time_to_finish(best.estimate.time.total().value(), best.config.world_size(), best.config.dp, in);
  return describe_finish(t, FinishFacts{o.tokens, best.config.world_size(), o.price, in.recipe != nullptr, o.failures},
                         indent);
}

// The --json contract, with the time to finish the budget with the best plan.
core::Json plan_json(const PlanOptions& o, const planner::PlannerResult& r, const std::vector<double>& simulated,
                     const planner::FinishInputs& in) {
  auto j = planner_result_json(r, true);
  for (std::size_t i = 0; i < simulated.size(); ++i) j["top"][i]["simulated_step_time_s"] = simulated[i];
  if (o.tokens > 0 && !r.top.empty()) {
    const auto& best = r.top.front();
    const auto t =
        planner::time_to_finish(best.estimate.time.total().value(), best.config.world_size(), best.config.dp, in);
    j["time_to_finish"] =
        finish_json(t, FinishFacts{o.tokens, best.config.world_size(), o.price, in.recipe != nullptr, o.failures});
  }
  return j;
}

void run(const PlanOptions& given) {
  PlanOptions o = given;
  // Without --tokens, the run's length as its TRAIN.json states it: time and cost to finish.
  const auto recipe = read_recipe(o.config);
  if (o.tokens == 0) o.tokens = recipe_tokens(recipe, o.global_batch, o.seq_len);
  std::string vocabulary_note;
  const auto model = model_of_recipe(spec::load_model(o.model, "--model"), recipe, vocabulary_note);
  const auto clusters = clusters_at_sizes(o.gpu, o.gpus, o.cluster);
  if (clusters.size() > 1 && o.refine > 0) {
    throw core::ConfigError(str_cat("--refine: expected a single --gpus count, got ", clusters.size()));
  }
  const planner::SearchOptions so = search_options(o, recipe);
  auto r =
      clusters.size() == 1 ? planner::search(model, clusters.front(), so) : planner::search_sizes(model, clusters, so);
  // The cluster of the best plan (the plan file and the report describe it).
  const auto& cluster = [&]() -> const spec::ClusterSpec& {
    for (const auto& c : clusters) {
      if (!r.top.empty() && c.num_gpus == r.top.front().config.world_size()) return c;
    }
    return clusters.front();
  }();
  std::vector<double> simulated;
  if (o.refine > 0) {
    // Re-rank the first K with the simulator; the rest keep their places after them.
    const auto refined = planner::refine(r, model, cluster, so, o.refine);
    std::vector<planner::Candidate> top;
    for (const auto& x : refined) {
      top.push_back(x.candidate);
      simulated.push_back(x.simulated_step_s);
    }
    for (std::size_t i = refined.size(); i < r.top.size(); ++i) top.push_back(r.top[i]);
    r.top = top;
  }
  const cost::CostModelOptions priced_with = planner::pricing_options(so);
  const planner::FinishInputs finish = planner::finish_inputs(model, so);
  std::vector<std::string> written;
  if (!o.out.empty())
    written = write_outputs(o.out, model, cluster, o, r, priced_with, finish_text(o, r, finish, "- "));
  const std::string export_note =
      r.top.empty() ? "" : export_differs_note(model, cluster, o.seq_len, r.top.front(), priced_with);
  if (o.json) {
    auto j = plan_json(o, r, simulated, finish);
    if (!export_note.empty()) j["export_note"] = export_note;  // plan_report.h: the file writes #1 otherwise
    print_json(j);
    return;
  }
  std::string sizes;
  for (const auto& c : clusters) sizes += str_cat(sizes.empty() ? "" : ", ", c.num_gpus);
  std::cout << str_cat(model.name, " on ", sizes, " x ", cluster.gpu().name, ", global batch ", o.global_batch, " x ",
                       o.seq_len, " tokens, objective ", o.objective, margin_text(o), "\npriced for ",
                       cost::describe(priced_with.runtime), ", continual recipe: ", describe_recipe(priced_with),
                       vocabulary_note.empty() ? "" : "\n" + vocabulary_note, "\n\n");
  if (!r.best_per_size.empty()) print_sizes(r, o.tokens, o.price, finish);
  print_top(r, simulated, cluster, priced_with.runtime, finish_text(o, r, finish, "  "), export_note);
  std::cout << str_cat(
      r.enumerated, " candidates, ", r.evaluated, " evaluated, ", r.feasible, " feasible, ", r.pareto.size(),
      clusters.size() > 1 ? " on the throughput/memory/GPUs" : " on the throughput/memory", " Pareto front, in ",
      fixed(r.seconds, 2), " s on ", r.threads, r.threads == 1 ? " thread\n" : " threads\n");
  if (!o.out.empty()) {
    // Only what write_outputs wrote: without a feasible plan there is no plan.json to export.
    std::string files;
    for (const auto& f : written) files += str_cat(files.empty() ? "" : ", ", f);
    std::cout << "wrote " << o.out << "/: " << files
              << (r.top.empty() ? " (no feasible plan: no plan.json and no exports)\n" : "\n");
  }
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "Search parallel configurations for a model on a cluster");
  cmd->add_option("--model", o->model, "Catalog name, model JSON or Hugging Face config.json")->required();
  cmd->add_option("--gpu", o->gpu, "GPU name (implies its node and fabric)");
  cmd->add_option(
      "--gpus", o->gpus,
      "Number of GPUs, or several (64,128,256): the best plan at each size and the Pareto front across them");
  cmd->add_option("--threads", o->threads,
                  "Worker threads (0 = all hardware threads; the result does not depend on it)")
      ->capture_default_str()
      ->check(cli::whole_number_in(0, 1024));
  cmd->add_option("--cluster", o->cluster, "Cluster profile name or JSON file (instead of --gpu/--gpus)");
  cmd->add_option("--global-batch", o->global_batch, "Sequences per optimizer step")
      ->required()
      ->check(cli::positive_number());
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence")->required()->check(cli::positive_number());
  cmd->add_option("--objective", o->objective,
                  "throughput|time|cost|headroom|time-to-train (the expected time to finish the budget: the steps, "
                  "TRAIN.json's evaluations, checkpoints and failures)")
      ->capture_default_str()
      ->check(CLI::IsMember({"throughput", "time", "cost", "headroom", "time-to-train"}));
  cmd->add_option("--tokens", o->tokens, "Token budget of the run (time and cost)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--price-per-gpu-hour", o->price, "USD per GPU-hour (objective cost)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--headroom", o->headroom, "HBM fraction to keep free (objective headroom)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--memory-margin", o->memory_margin,
                  "HBM fraction every plan leaves free, whatever the objective (e.g. 0.1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--top", o->top, "How many plans to list")
      ->capture_default_str()
      ->check(cli::whole_number_in(1, 1000));
  cmd->add_option("--fix", o->fix, "Pin fields: tp=8,pp=4,zero=1,recompute=selective,...");
  cmd->add_option("--refine", o->refine, "Re-rank the top K with the discrete-event simulator")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--flash-attention,!--no-flash-attention", o->flash_attention, "Fused attention (default on)");
  cmd->add_flag("--fused-cross-entropy", o->fused_cross_entropy, kFusedCrossEntropyHelp);
  add_moe_dispatcher_option(*cmd, o->moe_dispatcher);
  cmd->add_option("--out", o->out, "Write plan.json, candidates.csv and report.md into this directory");
  add_runtime_option(*cmd, o->runtime, "default megatron (cpt with --for-executor or --gpu local)");
  add_recipe_option(*cmd, o->config);
  add_failure_options(*cmd, o->failures);
  cmd->add_flag("--for-executor", o->for_executor,
                "Only plans cpt's own executor runs (what cpt run trains): no ZeRO-3 with pipelines, no parameter "
                "offload, no hybrid sharding with context parallelism, tied embeddings on one stage");
  cmd->add_option("--target", o->target,
                  "Only plans this framework's export runs as planned, priced for it unless --runtime is given "
                  "(cpt: as --for-executor; docs/planner.md, \"Targets\")")
      ->check(CLI::IsMember({"megatron", "deepspeed", "torchtitan", "cpt"}));
  cmd->add_flag("--json", o->json, "Print the JSON contract instead of tables");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
