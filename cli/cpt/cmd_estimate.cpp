// cpt estimate: memory and step time of one explicit configuration (the cost model).
// A configuration that does not fit in memory is an answer (feasible: false, exit 0); one that
// breaks a rule (tp not dividing the heads, ...) is bad input (exit 2).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "cli/cpt/commands.h"
#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "cli/cpt/recipe_flag.h"
#include "cli/cpt/runtime_flag.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/error_band.h"
#include "costmodel/estimate_json.h"
#include "costmodel/runtime_profile.h"
#include "costmodel/step_estimator.h"
#include "planner/what_if.h"
#include "spec/executor_support.h"
#include "spec/hardware_catalog.h"
#include "spec/model_io.h"

namespace cpt::cli {
namespace {

using core::str_cat;

struct EstimateOptions {
  std::string model;
  std::string gpu;
  std::string cluster;
  int gpus = 0;
  int gpus_per_node = 0;
  int tp = 1, pp = 1, dp = 0, vp = 1, cp = 1, ep = 1, etp = 1;
  int micro_batch = 1;
  int global_batch = 0;
  int seq_len = 0;
  int zero = 0;
  bool hsdp = false;
  std::string recompute = "none";
  std::string schedule = "1f1b";
  bool sequence_parallel = false;
  bool flash_attention = true;
  bool fused_cross_entropy = false;
  std::string moe_dispatcher = "alltoall";
  bool for_executor = false;
  std::string runtime;  // empty: megatron, or cpt with --for-executor
  std::string config;   // TRAIN.json: the continual recipe priced
  std::string precision = "bf16";
  std::string offload = "none";
  double cuda_context_gib = -1;
  double fragmentation = -1;
  bool json = false;
};

spec::ClusterSpec resolve_cluster(const EstimateOptions& o) {
  const auto& cat = spec::HardwareCatalog::builtin();
  if (o.cluster.empty() && o.gpu.empty())
    throw core::ConfigError("--gpu or --cluster: expected one of them, got neither");
  spec::ClusterSpec c;
  if (!o.cluster.empty()) {
    c = cat.load_cluster(o.cluster, "--cluster");
    if (o.gpus > 0 && o.gpus != c.num_gpus) {
      throw core::ConfigError(str_cat("--gpus: the cluster file has ", c.num_gpus, " GPUs, got --gpus ", o.gpus));
    }
  } else {
    if (o.gpus < 1) throw core::ConfigError("--gpus: expected the number of GPUs (>= 1) with --gpu");
    if (o.gpu == "local") return cluster_for_gpu_flag(o.gpu, o.gpus, "--gpu");
    // The GPU's default cluster, reshaped like `cpt whatif` does (one implementation).
    planner::HardwareChange change;
    change.gpu = o.gpu;
    change.gpus = o.gpus;
    if (o.gpus_per_node > 0) change.gpus_per_node = o.gpus_per_node;
    c = planner::apply_change(cat.cluster_for_gpu(o.gpu, 1, "--gpu"), change, cat);
  }
  return c;
}

spec::Precision precision_of(const std::string& s) {
  if (s == "bf16") return spec::Precision::kBf16;
  if (s == "fp16") return spec::Precision::kFp16;
  if (s == "fp8") return spec::Precision::kFp8;
  if (s == "fp32") return spec::Precision::kFp32;
  throw core::ConfigError(str_cat("--precision: expected one of bf16|fp16|fp8|fp32, got \"", s, "\""));
}

void print_table(const cost::Estimate& e, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                 const spec::ParallelConfig& p, int seq_len) {
  std::cout << str_cat(
      m.name, " on ", c.num_gpus, " x ", c.gpu().name, ": tp ", p.tp, " cp ", p.cp, " pp ", p.pp, " (v ",
      p.virtual_stages, ") dp ", p.dp, ", micro-batch ", p.micro_batch, ", global batch ", p.global_batch, " (",
      p.grad_accum(), " microbatches), seq ", seq_len, ", ZeRO ", p.zero_stage, p.hybrid_shard ? " HSDP" : "",
      ", recompute ", spec::to_string(p.recompute), p.sequence_parallel ? ", SP" : "",
      p.ep > 1 || p.etp > 1 ? str_cat(", ep ", p.ep, " etp ", p.etp, " (expert dp ", p.expert_dp(), ")") : "", "\n\n");
  using core::Align;
  core::TextTable t({"step time", "seconds", "share"}, {Align::kLeft, Align::kRight, Align::kRight});
  const double total = e.time.total().value();
  auto row = [&](const char* name, core::Seconds s) {
    t.add_row({name, fixed(s.value(), 4), fixed(100 * s.value() / total, 1) + "%"});
  };
  row("compute", e.time.compute);
  row("recompute", e.time.recompute);
  row("tp_comm", e.time.tp_comm);
  row("cp_comm", e.time.cp_comm);
  if (e.time.ep_comm > core::Seconds(0)) row("ep_comm", e.time.ep_comm);
  row("pp_comm", e.time.pp_comm);
  row("pp_bubble", e.time.pp_bubble);
  row("dp_comm", e.time.dp_comm);
  row("optimizer", e.time.optimizer);
  if (e.time.continual.value() > 0) row("continual", e.time.continual);  // teacher, KL, EWC (--config)
  row("other", e.time.other);
  row("total", e.time.total());
  std::cout << t.render();
  if (p.pp > 1) {
    // The parts are one rank's: under a pipeline the ranks spend the same step differently.
    std::cout << str_cat("(as pipeline rank ", e.critical_pp_rank,
                         " spends the step, the last to finish: pp_bubble is its idle time in the schedule, "
                         "uneven stages included)\n");
  }
  std::cout << "\n";
  core::TextTable mem(
      {"pp rank", "weights", "grads", "optimizer", "activations", "other", "teacher", "ewc", "total GiB"},
      {Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight,
       Align::kRight, Align::kRight});
  for (std::size_t r = 0; r < e.memory_per_pp_rank.size(); ++r) {
    const auto& x = e.memory_per_pp_rank[r];
    auto g = [](core::Bytes b) { return fixed(core::to_gibibytes(b), 2); };
    mem.add_row({std::to_string(r), g(x.weights), g(x.grads), g(x.optimizer), g(x.activations), g(x.other),
                 g(x.teacher), g(x.ewc), g(x.total())});
  }
  std::cout << mem.render() << "\n"
            << str_cat("tokens/s per GPU ", fixed(e.tokens_per_s_per_gpu, 1), ", model TFLOP/s per GPU ",
                       fixed(e.model_tflops_per_gpu, 1), ", MFU ", fixed(100 * e.mfu, 1), "%, HFU ",
                       fixed(100 * e.hfu, 1),
                       "% of the dense peak (FLOPs: Korthikanti et al. 2022 eq. 7, HFU adds recomputation)\n");
}

void run(const EstimateOptions& o) {
  const auto recipe = read_recipe(o.config);
  std::string vocabulary_note;
  const auto model = model_of_recipe(spec::load_model(o.model, "--model"), recipe, vocabulary_note);
  const auto cluster = resolve_cluster(o);
  spec::ParallelConfig p;
  p.tp = o.tp;
  p.pp = o.pp;
  p.cp = o.cp;
  p.virtual_stages = o.vp;
  p.ep = o.ep;
  p.etp = o.etp;
  const int mp = o.tp * o.pp * o.cp;
  p.dp = o.dp > 0 ? o.dp : cluster.num_gpus / mp;
  if (o.dp == 0 && cluster.num_gpus % mp != 0) {
    throw core::ConfigError(str_cat("--dp: the GPUs (", cluster.num_gpus, ") are not divisible by tp (", o.tp,
                                    ") * pp (", o.pp, ") * cp (", o.cp, ") = ", mp));
  }
  p.micro_batch = o.micro_batch;
  p.global_batch = o.global_batch;
  p.zero_stage = o.zero;
  p.hybrid_shard = o.hsdp;
  p.recompute = o.recompute == "full"
                    ? spec::Recompute::kFull
                    : (o.recompute == "selective" ? spec::Recompute::kSelective : spec::Recompute::kNone);
  p.sequence_parallel = o.sequence_parallel;
  p.offload = o.offload == "params" ? spec::Offload::kOptimizerAndParams
                                    : (o.offload == "optimizer" ? spec::Offload::kOptimizer : spec::Offload::kNone);
  if (o.schedule == "zb_h1") {
    p.schedule = spec::ScheduleKind::kZeroBubbleH1;
  } else if (o.schedule == "gpipe") {
    p.schedule = spec::ScheduleKind::kGPipe;
  } else {
    p.schedule = o.vp > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
  }
  cost::CostModelOptions opts;
  opts.precision = precision_of(o.precision);
  if (!cluster.gpu().peak(opts.precision)) {
    throw core::ConfigError(str_cat("--precision: ", cluster.gpu().display_name, " has no dense ", o.precision,
                                    " throughput in its profile"));
  }
  opts.flash_attention = o.flash_attention;
  opts.fused_cross_entropy = o.fused_cross_entropy;
  const auto runtime = runtime_named(o.runtime);
  if (o.for_executor && runtime && *runtime != spec::Runtime::kCpt) {
    throw core::ConfigError(
        str_cat("--for-executor: prices the plan for cpt's executor, but --runtime says ", o.runtime));
  }
  opts = cost::for_runtime(opts, o.for_executor ? spec::Runtime::kCpt : runtime.value_or(spec::Runtime::kMegatron));
  opts.moe_dispatcher = moe_dispatcher_named(o.moe_dispatcher, opts.runtime);
  opts = with_recipe(opts, recipe);
  if (o.cuda_context_gib > 1e6) {
    throw core::ConfigError(str_cat("--cuda-context-GiB: expected at most 1e6, got ", o.cuda_context_gib));
  }
  if (o.cuda_context_gib >= 0) opts.cuda_context = core::gibibytes(o.cuda_context_gib);
  if (o.fragmentation >= 0) opts.fragmentation = o.fragmentation;
  const auto ev = cost::evaluate(model, cluster, p, o.seq_len, opts);
  if (const auto* inf = std::get_if<cost::Infeasible>(&ev);
      inf && inf->reason == cost::InfeasibleReason::kInvalidConfig) {
    throw core::ConfigError(str_cat("parallel configuration: ", inf->detail));
  }
  // Priced for cpt's executor, a layout it does not run is said so (`cpt train` refuses it).
  std::optional<std::string> executor_gap;
  if (opts.runtime == spec::Runtime::kCpt) {
    if (const auto gap = spec::find_executor_gap(p, model, o.seq_len))
      executor_gap = spec::describe(*gap, p, o.seq_len);
  }
  if (o.json) {
    core::Json json = cost::evaluation_to_json(ev);
    json["runtime"] = spec::to_string(opts.runtime);
    if (executor_gap) json["executor_gap"] = *executor_gap;
    if (const auto* e = std::get_if<cost::Estimate>(&ev)) {
      json["step_time_band_s"] = cost::step_time_band_to_json(e->time.total(), opts.runtime, cluster.gpu());
    }
    print_json(json);
    return;
  }
  if (const auto* inf = std::get_if<cost::Infeasible>(&ev)) {
    std::cout << "infeasible (" << cost::to_string(inf->reason) << "): " << inf->detail << "\n";
    return;
  }
  print_table(std::get<cost::Estimate>(ev), model, cluster, p, o.seq_len);
  std::cout << "priced for " << cost::describe(opts.runtime) << ", continual recipe: " << describe_recipe(opts)
            << "; step time: "
            << cost::describe_band(std::get<cost::Estimate>(ev).time.total(), opts.runtime, cluster.gpu()) << "\n";
  if (!vocabulary_note.empty()) std::cout << vocabulary_note << "\n";
  if (executor_gap) std::cout << "note: cpt train does not run this layout: " << *executor_gap << "\n";
}

}  // namespace

void register_estimate_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand("estimate", "Memory and step time of one explicit configuration");
  cmd->add_option("--model", o->model, "Catalog name, model JSON or Hugging Face config.json")->required();
  cmd->add_option("--gpu", o->gpu, "GPU name (implies its DGX-style node and fabric)");
  cmd->add_option("--gpus", o->gpus, "Number of GPUs")->check(cli::positive_number());
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node (default: the GPU's node)")
      ->check(cli::positive_number());
  cmd->add_option("--cluster", o->cluster, "Cluster profile name or JSON file (instead of --gpu)");
  cmd->add_option("--tp", o->tp, "Tensor-parallel degree")->capture_default_str()->check(cli::positive_number());
  cmd->add_option("--pp", o->pp, "Pipeline-parallel degree")->capture_default_str()->check(cli::positive_number());
  cmd->add_option("--dp", o->dp, "Data-parallel degree (default: GPUs / (tp * pp * cp))")
      ->check(cli::positive_number());
  cmd->add_option("--vp", o->vp, "Virtual stages per pipeline rank (> 1: interleaved 1F1B)")
      ->capture_default_str()
      ->check(cli::positive_number());
  cmd->add_option("--schedule", o->schedule,
                  "Pipeline schedule: 1f1b (interleaved when --vp > 1), zb_h1 (zero bubble, split backward), gpipe")
      ->capture_default_str()
      ->check(CLI::IsMember({"1f1b", "zb_h1", "gpipe"}));
  cmd->add_option("--cp", o->cp, "Context-parallel degree")->capture_default_str()->check(cli::positive_number());
  cmd->add_option("--ep", o->ep, "Expert-parallel degree (mixtures of experts; folded over tp * cp * dp)")
      ->capture_default_str()
      ->check(cli::positive_number());
  cmd->add_option("--etp", o->etp, "Expert tensor-parallel degree (each expert's MLP split; default 1)")
      ->capture_default_str()
      ->check(cli::positive_number());
  cmd->add_option("--micro-batch", o->micro_batch, "Sequences per microbatch per dp rank")
      ->required()
      ->check(cli::positive_number());
  cmd->add_option("--global-batch", o->global_batch, "Sequences per optimizer step")
      ->required()
      ->check(cli::positive_number());
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence")->required()->check(cli::positive_number());
  cmd->add_option("--zero", o->zero, "ZeRO stage 0..3")->capture_default_str()->check(cli::whole_number_in(0, 3));
  cmd->add_flag("--hsdp", o->hsdp, "Hybrid sharding: ZeRO-3 inside a node, replicas across (needs --zero 3)");
  cmd->add_option("--recompute", o->recompute, "none|selective|full")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "selective", "full"}));
  cmd->add_flag("--sequence-parallel", o->sequence_parallel, "Megatron sequence parallelism (needs tp >= 2)");
  cmd->add_flag("--flash-attention,!--no-flash-attention", o->flash_attention,
                "Fused attention (default on; --no-flash-attention materialises the scores)");
  cmd->add_flag("--fused-cross-entropy", o->fused_cross_entropy, kFusedCrossEntropyHelp);
  add_moe_dispatcher_option(*cmd, o->moe_dispatcher);
  cmd->add_option("--precision", o->precision, "bf16|fp16|fp8|fp32")->capture_default_str();
  cmd->add_option("--offload", o->offload, "none|optimizer|params")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "optimizer", "params"}));
  cmd->add_option("--cuda-context-GiB", o->cuda_context_gib,
                  "Memory per GPU for the CUDA context and library workspaces (default 0.75)")
      ->check(CLI::Range(0.0, 64.0));
  cmd->add_option("--fragmentation", o->fragmentation,
                  "Allocator slack as a fraction of activations and buffers (default 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--for-executor", o->for_executor,
                "Price the plan as cpt's executor runs it (eager kernel dispatch, all-gather context parallelism) "
                "instead of as Megatron-LM does");
  add_runtime_option(*cmd, o->runtime, "default megatron");
  add_recipe_option(*cmd, o->config);
  cmd->add_flag("--json", o->json, "Print the JSON contract instead of tables");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
