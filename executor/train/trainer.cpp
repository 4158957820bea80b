#include "executor/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/device.h"
#include "executor/dist/launch_info.h"
#include "executor/dist/process_groups.h"
#include "executor/parallel/full_state.h"
#include "executor/parallel/fully_sharded.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/pipeline_executor.h"
#include "executor/train/step_optimizer.h"
#include "spec/executor_support.h"
#include "spec/parameter_order.h"
#include "spec/rank_layout.h"
#include "spec/sequence_split.h"
#include "executor/io/model_weights.h"
#include "executor/train/continual_objective.h"
#include "executor/train/optimizer_choice.h"
#include "executor/train/rank_model.h"
#include "executor/train/run_checkpoints.h"
#include "executor/train/run_meter.h"
#include "executor/train/stop_request.h"
#include "executor/measure/step_profiler.h"
#include "executor/measure/storage_bytes.h"
#include "executor/model/llama_model.h"
#include "executor/train/adamw.h"
#include "executor/train/regularizers.h"
#include "executor/train/run_inputs.h"
#include "executor/train/train_step.h"
#include "spec/model_io.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t resolve_steps(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options) {
  if (options.steps) return *options.steps;
  if (config.steps) return *config.steps;
  const auto tokens_per_step = std::int64_t{plan.parallel.global_batch} * plan.workload.seq_len;
  if (config.tokens) return (*config.tokens + tokens_per_step - 1) / tokens_per_step;
  if (plan.workload.train_tokens > 0) return (plan.workload.train_tokens + tokens_per_step - 1) / tokens_per_step;
  throw core::ConfigError(str_cat(config.origin.string(), ": $: expected \"steps\" or \"tokens\" (the plan has no token ",
                                  "budget either), got neither"));
}

// Keeps only the lines of a JSONL file whose "step" is below `step` (after a resume).
void truncate_jsonl(const fs::path& path, std::int64_t step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("step", std::int64_t{0}) < step) kept += line + "\n";
  }
  core::write_file_atomic(path, kept);
}

class JsonlWriter {
 public:
  explicit JsonlWriter(const fs::path& path) : out_(path, std::ios::app), path_(path) {
    if (!out_) throw core::RuntimeError(str_cat(path.string(), ": cannot open for writing"));
  }
  void write(const nlohmann::ordered_json& j) {
    out_ << j.dump() << "\n";
    out_.flush();
    if (!out_) throw core::RuntimeError(str_cat(path_.string(), ": write failed"));
  }

 private:
  std::ofstream out_;
  fs::path path_;
};

std::string duration_text(double s) {
  const auto t = static_cast<long long>(std::llround(std::max(0.0, s)));
  if (t >= 3600) return str_cat(t / 3600, "h", (t % 3600) / 60, "m");
  if (t >= 60) return str_cat(t / 60, "m", t % 60, "s");
  return str_cat(t, "s");
}

// Mean loss over the first `sequences` sequences of `source`, in order, in microbatches of the
// plan's size (and one smaller for the remainder): the same sequences whatever the layout.
double evaluate_set(const std::function<double(const Batch&)>& loss_sum_of, const DataSource& source,
                    std::int64_t sequences, const LoaderOptions& base, const torch::Device& device,
                    std::int64_t* tokens_out) {
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device);
  LoaderOptions o = base;
  o.shuffle = false;
  DataLoader loader({source}, o);
  sequences = std::min(sequences, loader.units(0));
  double loss = 0;
  std::int64_t tokens = 0;
  auto add = [&](const Batch& cpu) {
    const auto b = cpu.to(device);
    loss += loss_sum_of(b);
    tokens += b.loss_tokens;
  };
  const std::int64_t full = sequences / o.micro_batch;
  for (std::int64_t i = 0; i < full; ++i) add(loader.next());
  if (const auto rest = sequences - full * o.micro_batch; rest > 0) {
    LoaderOptions r = o;
    r.micro_batch = static_cast<int>(rest);
    DataLoader tail({source}, r);
    tail.skip(full * o.micro_batch);
    add(tail.next());
  }
  *tokens_out = tokens;
  return tokens > 0 ? loss / static_cast<double>(tokens) : 0.0;
}

// The layouts the executor runs, or a ConfigError saying what it does not run yet.
void require_supported(const spec::Plan& plan) {
  const auto& par = plan.parallel;
  if (par.cp > 1) {
    if (auto e = spec::find_sequence_split_error(plan.workload.seq_len, par.cp)) {
      throw core::ConfigError(str_cat("plan: context parallelism: ", *e));
    }
  }
  if (auto gap = spec::find_executor_gap(par, plan.model, plan.workload.seq_len)) {
    throw core::ConfigError(str_cat("plan: ", spec::describe(*gap, par, plan.workload.seq_len)));
  }
}

// Stops `profiler` and writes DIR/step_S.rank_R.trace.json and .ops.json; rank 0 logs its
// largest operators.
void write_step_profile(StepProfiler& profiler, const fs::path& dir, std::int64_t step, int rank, double step_s) {
  const auto stem = str_cat("step_", step, ".rank_", rank);
  const auto profile = profiler.finish(dir / (stem + ".trace.json"));
  auto j = to_json(profile);
  j["step"] = step;
  j["rank"] = rank;
  j["step_time_s"] = step_s;
  core::write_file_atomic(dir / (stem + ".ops.json"), j.dump(2) + "\n");
  if (rank != 0) return;
  std::string top;
  for (std::size_t i = 0; i < std::min<std::size_t>(6, profile.by_name.size()); ++i) {
    const auto& t = profile.by_name[i];
    top += str_cat(i == 0 ? "" : ", ", t.name, " ", core::fixed(t.seconds * 1e3, 1), " ms x", t.calls);
  }
  core::info0("profile: step ", step, " took ", core::fixed(step_s * 1e3, 1), " ms with the profiler on; ", top,
              "; per rank in ", dir.string());
}

}  // namespace

TrainSummary train(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options) {
  const auto& par = plan.parallel;
  require_supported(plan);
  const auto launch = launch_info_from_env();
  const bool rank0 = launch.rank == 0;
  if (launch.distributed()) core::set_log_prefix(str_cat("r", launch.rank), rank0);
  const spec::RankLayout layout(par, plan.cluster.node.gpus_per_node);
  // The device first: on CUDA each local rank takes its own, which NCCL's groups are then made on.
  const auto device = pick_device(options.device.value_or(config.device), launch.local_rank, launch.local_world_size,
                                  launch.gpu_bound_per_task);
  const auto groups =
      make_process_groups(layout, launch, std::chrono::seconds(config.collective_timeout_s), device.is_cuda());
  if (config.threads > 0) {
    at::set_num_threads(config.threads);
  } else if (launch.local_world_size > 1) {
    // Ranks on one host share its cores: without this each would start one thread per core.
    const auto cores = static_cast<int>(std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, cores / launch.local_world_size));
  }
  const auto& spec = plan.model;
  const int seq_len = plan.workload.seq_len;
  if (seq_len > spec.max_seq_len) {
    throw core::ConfigError(str_cat("plan: sequence length ", seq_len, " exceeds model ", spec.name, "'s max_seq_len ",
                                    spec.max_seq_len));
  }
  const auto total_steps = resolve_steps(plan, config, options);
  // Rank 0 writes the run's files and prepares its inputs; the others wait, then reuse them.
  if (rank0) {
    fs::create_directories(options.out_dir);
    spec::save_plan(plan, options.out_dir / "plan.json");
    // What `cpt doctor` needs to check the run against its configuration: the TRAIN.json (its path
    // resolves relative data paths; the copy survives its deletion) and the schedule's length.
    if (fs::exists(config.origin)) {
      std::ifstream in(config.origin, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      core::write_file_atomic(options.out_dir / "train_config.json", text);
    }
    const nlohmann::ordered_json run{{"config", fs::absolute(config.origin).string()}, {"total_steps", total_steps}};
    core::write_file_atomic(options.out_dir / "run.json", run.dump(2) + "\n");
  }
  std::optional<RunInputs> prepared;
  if (rank0) {
    recover_unfinished_checkpoints(options.out_dir / "checkpoints");
    prepared = prepare_run_inputs(config, spec, options.out_dir);
  }
  groups.world->barrier();
  if (!rank0) prepared = prepare_run_inputs(config, spec, options.out_dir);
  auto& inputs = *prepared;

  const TensorParallel tp{groups.tp.get(), par.sequence_parallel};
  // Context parallelism: each rank of the cp group holds S/cp tokens of every sequence
  // (context_parallel.h); gradients and ZeRO shards span dp × cp (groups.replicas()).
  const ContextParallel cp{groups.cp.get()};
  Communicator& replicas = groups.replicas();
  auto rank = build_rank_model(plan, config, tp, cp, groups, device);
  auto& model = rank.first();
  auto& pipeline = rank.pipeline;
  const FullStateGroups full_state_groups{tp, groups.pp.get(), groups.coord.dp == 0 && groups.coord.cp == 0};
  ContinualObjective continual;
  estimate_or_load_ewc(continual, plan, config, inputs, rank, groups, full_state_groups, options.out_dir, device);
  const auto choice = choose_step_optimizer(par, config, rank.named, groups, model);
  auto& optimizer = *choice.optimizer;
  FullyShardedModel* zero3 = choice.zero3;
  if (config.keep_optimizer_state) keep_base_optimizer_state(config, optimizer, spec, tp, device);
  // Evaluation runs on replica 0 (all its cp ranks: attention gathers over them), or on every rank
  // under ZeRO-3 (its gathers span the dp group).
  const bool evaluates = zero3 != nullptr || groups.coord.dp == 0;
  // Each step's global batch is split in dp contiguous shares, in sample order.
  const int dp_rank = groups.dp->rank();
  const std::int64_t per_rank = std::int64_t{par.micro_batch} * par.grad_accum();
  const LrSchedule schedule = run_lr_schedule(config, total_steps);
  LoaderOptions loader_options;
  loader_options.seq_len = seq_len;
  loader_options.micro_batch = par.micro_batch;
  loader_options.seed = config.seed;
  loader_options.packing = config.packing;
  DataLoader loader(inputs.train, loader_options);
  // The teacher and the EWC anchor come from the starting weights, before any resume.
  attach_teacher_and_penalties(continual, plan, config, rank, choice, tp, cp, groups, device);
  const auto& objective = continual.objective;

  const auto ckpt_root = options.out_dir / "checkpoints";
  TrainerCounters resumed;
  if (options.resume) resumed = resume_from_latest(ckpt_root, spec, rank, choice, loader, tp, device);
  std::int64_t step = resumed.step, tokens_seen = resumed.tokens, skipped = resumed.skipped;
  double lr_scale = resumed.lr_scale;                       // the KL guard's cut of the learning rate
  std::int64_t kl_over = resumed.kl_steps_over_threshold;  // consecutive steps with KL above its threshold
  const auto first_step = step;
  std::optional<JsonlWriter> metrics, eval_log;  // rank 0 only
  if (rank0) {
    truncate_jsonl(options.out_dir / "metrics.jsonl", step);
    truncate_jsonl(options.out_dir / "eval.jsonl", step);
    metrics.emplace(options.out_dir / "metrics.jsonl");
    eval_log.emplace(options.out_dir / "eval.jsonl");
  }

  auto save = [&](std::int64_t at_step) {
    return save_run_checkpoint(ckpt_root, {at_step, tokens_seen, skipped, lr_scale, kl_over}, spec, rank, choice,
                               loader, config, schedule, full_state_groups, rank0);
  };
  // Evaluation runs on data-parallel replica 0 (its tensor- and pipeline-parallel ranks together);
  // rank 0 writes.
  auto loss_sum_of = [&](const Batch& whole) {
    const Batch b = context_parallel_slice(whole, cp);
    double sum = pipeline ? pipeline->loss_sum(b) : model->loss_sum(b).item<double>();
    if (cp.active()) {  // each cp rank holds the loss of its tokens
      auto t = torch::tensor({sum}, torch::kFloat64);
      groups.cp->all_reduce_sum(t)->wait();
      sum = t.item<double>();
    }
    return sum;
  };
  auto evaluate = [&](std::int64_t at_step) {
    if (!evaluates) return;  // replicas are identical
    for (std::size_t i = 0; i < inputs.eval.size(); ++i) {
      std::int64_t tokens = 0;
      const double loss =
          evaluate_set(loss_sum_of, inputs.eval[i], inputs.eval_sequences[i], loader_options, device, &tokens);
      if (!rank0) continue;
      nlohmann::ordered_json row{{"step", at_step}, {"set", inputs.eval[i].name}, {"loss", loss},
                                 {"perplexity", std::exp(loss)}, {"tokens", tokens}};
      eval_log->write(row);
      core::info0("eval step ", at_step, " ", inputs.eval[i].name, ": loss ", loss, ", perplexity ", std::exp(loss));
    }
  };

  ModelStateBytes last_state;  // of the latest step
  // Step times, communication waits and the first step's counts (run_meter.h): measured.json.
  RunMeter meter(*groups.clocks, device.is_cpu());
  const bool bar = rank0 && options.progress && ::isatty(STDOUT_FILENO) != 0;
  const int accum = par.grad_accum();
  TrainSummary summary;
  summary.first_step = first_step;
  const auto run_start = Clock::now();
  core::info0("train: ", spec.name, " (", spec.num_params(), " parameters) on ", device.str(), ", steps ", first_step,
              " -> ", total_steps, ", ", par.global_batch, " x ", seq_len, " tokens per step (micro-batch ",
              par.micro_batch, " x ", accum, ")");
  const auto end_step = std::min(total_steps, options.stop_at.value_or(total_steps));
  if (rank0 && options.profile_step && (*options.profile_step < step || *options.profile_step >= end_step)) {
    core::warn("--profile-step ", *options.profile_step, ": this run trains steps ", step, " to ", end_step - 1,
                "; no step is profiled");
  }
  if (config.eval_at_start && step == 0 && !inputs.eval.empty()) evaluate(0);
  const StopRequest stop;
  while (step < end_step) {
    meter.begin_step(step == first_step);
    std::optional<StepProfiler> profiler;
    if (options.profile_step && step == *options.profile_step) profiler.emplace(device.is_cuda());
    const auto t0 = Clock::now();
    const double lr = schedule.at(step) * lr_scale;
    std::vector<Batch> micro;
    loader.skip(dp_rank * per_rank);
    for (int m = 0; m < accum; ++m) micro.push_back(context_parallel_slice(loader.next(), cp));
    loader.skip((par.dp - 1 - dp_rank) * per_rank);
    auto r = pipeline ? train_step_pipelined(*pipeline, *rank.schedule, optimizer, micro, lr, config.grad_clip, device,
                                             replicas, objective.ewc, objective.ewc_lambda)
                      : train_step(*model, optimizer, micro, lr, config.grad_clip, device, replicas, objective);
    if (zero3 != nullptr && continual.ewc) r.ewc_penalty = zero3->ewc_penalty();
    if (config.distill && config.distill->guard_threshold) {
      kl_over = r.kl > *config.distill->guard_threshold ? kl_over + 1 : 0;
      if (kl_over >= config.distill->guard_patience) {
        lr_scale *= config.distill->guard_lr_factor;
        kl_over = 0;
        core::warn("step ", step, ": KL ", r.kl, " above ", *config.distill->guard_threshold, " for ",
                   config.distill->guard_patience, " steps; learning rate now x", lr_scale, " of the schedule");
      }
    }
    last_state = r.state;
    const double loss = r.loss;
    const double grad_norm = r.grad_norm;
    const bool finite = r.applied;
    if (!finite) {
      ++skipped;
      core::warn("step ", step, ": loss ", loss, ", gradient norm ", grad_norm, ": not finite, update skipped");
    }
    synchronize(device);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const bool profiled = profiler.has_value();
    if (profiler) {
      write_step_profile(*profiler, options.out_dir / "profile", step, launch.rank, dt);
      profiler.reset();
      groups.world->barrier();  // ranks wrote for different times: start the next step together
    }
    const std::int64_t step_tokens = std::int64_t{par.global_batch} * seq_len;
    tokens_seen += step_tokens;
    // The first step of a process pays one-off allocation costs; a profiled step, the profiler's.
    meter.end_step(dt, step_tokens, step > first_step && !profiled);
    ++step;
    nlohmann::ordered_json row{{"step", step - 1},
                               {"loss", loss},
                               {"lr", lr},
                               {"grad_norm", grad_norm},
                               {"tokens", tokens_seen},
                               {"tokens_per_s", static_cast<double>(step_tokens) / dt},
                               {"step_time_s", dt},
                               {"peak_memory_bytes", peak_memory_bytes(device)},
                               {"skipped", !finite}};
    if (config.distill) row["kl"] = r.kl;
    if (config.ewc) row["ewc_penalty"] = r.ewc_penalty;
    nlohmann::ordered_json consumed;
    for (std::size_t i = 0; i < loader.sources().size(); ++i) consumed[loader.sources()[i].name] = loader.consumed()[i];
    row["samples_by_source"] = consumed;
    if (rank0) metrics->write(row);
    summary.final_loss = loss;
    const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
    const double eta = elapsed / static_cast<double>(step - first_step) * static_cast<double>(end_step - step);
    if (bar) {
      const int width = 30;
      const int filled = static_cast<int>(width * step / total_steps);
      std::printf("\rstep %lld/%lld [%s%s] loss %.4f lr %.2e %.0f tok/s ETA %s   ", static_cast<long long>(step),
                  static_cast<long long>(total_steps), std::string(static_cast<std::size_t>(filled), '=').c_str(),
                  std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), loss, lr,
                  static_cast<double>(step_tokens) / dt, duration_text(eta).c_str());
      std::fflush(stdout);
    } else if (rank0 && config.log_interval_steps > 0 &&
               ((step - 1) % config.log_interval_steps == 0 || step == total_steps)) {
      std::printf("step %lld/%lld loss %.4f lr %.3e grad_norm %.3f %.0f tok/s ETA %s\n", static_cast<long long>(step),
                  static_cast<long long>(total_steps), loss, lr, grad_norm, static_cast<double>(step_tokens) / dt,
                  duration_text(eta).c_str());
      std::fflush(stdout);
    }
    if (stop.agreed(*groups.world)) {
      summary.stopped = true;
      core::info0("stop requested: ending at step ", step, " with a checkpoint (--resume continues)");
      break;
    }
    if (config.eval_interval_steps > 0 && step % config.eval_interval_steps == 0 && step < end_step) evaluate(step);
    if (config.checkpoint.interval_steps > 0 && step % config.checkpoint.interval_steps == 0 && step < end_step) {
      save(step);
    }
  }
  if (bar) std::printf("\n");
  if (!inputs.eval.empty() && !summary.stopped) evaluate(step);
  summary.checkpoint = save(step);
  summary.last_step = step;
  summary.skipped_steps = skipped;
  summary.tokens_per_s = meter.tokens_per_s();
  RunFacts facts;
  facts.device = device.str();
  facts.steps = step - first_step;
  facts.skipped_steps = skipped;
  facts.global_batch_tokens = std::int64_t{par.global_batch} * seq_len;
  facts.final_loss = summary.final_loss;
  facts.dp_bucket_bytes = static_cast<std::int64_t>(config.dp_bucket_mib * 1024 * 1024);
  facts.state = last_state;
  facts.peak_memory_bytes = peak_memory_bytes(device);
  const auto measured = meter.finish(facts, *groups.world, layout);
  if (rank0) spec::save_measured_run(options.out_dir / "measured.json", measured);
  groups.world->barrier();  // every rank returns after the final checkpoint exists
  return summary;
}

}  // namespace cpt::exec
