#include "executor/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/device.h"
#include "executor/dist/launch_info.h"
#include "executor/dist/process_groups.h"
#include "executor/dist/rank_board.h"
#include "executor/measure/step_profiler.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/full_state.h"
#include "executor/parallel/fully_sharded.h"
#include "executor/parallel/pipeline_executor.h"
#include "executor/train/continual_objective.h"
#include "executor/train/kl_guard.h"
#include "executor/train/optimizer_choice.h"
#include "executor/train/rank_model.h"
#include "executor/train/run_checkpoints.h"
#include "executor/train/run_evaluation.h"
#include "executor/train/run_inputs.h"
#include "executor/train/run_log.h"
#include "executor/train/run_meter.h"
#include "executor/train/stop_request.h"
#include "executor/train/train_step.h"
#include "spec/executor_support.h"
#include "spec/rank_layout.h"
#include "spec/sequence_split.h"
#include "spec/token_budget.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Padded rows with a capacity factor: each expert's capacity would count the padding, whose
// amount depends on the microbatch and on the layout's rounding (moe_mlp.h), and padding ahead of
// another row's tokens could take their places. Refused rather than trained differently per layout.
void require_packing_the_model_takes(const spec::Plan& plan, const TrainConfig& config) {
  if (config.packing != Packing::kPadded || plan.model.moe.capacity_factor <= 0) return;
  throw core::ConfigError(str_cat(config.origin.string(), ": packing: \"padded\" with ", plan.model.name,
                                  "'s expert capacity factor ", plan.model.moe.capacity_factor,
                                  ": expected \"packed\" (or a dropless model), got \"padded\""));
}

// ConfigError when nothing states the run's length (checked before the data is prepared).
void require_run_length(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options) {
  if (options.steps || config.steps || config.tokens || config.epochs || plan.workload.train_tokens > 0) return;
  throw core::ConfigError(str_cat(config.origin.string(),
                                  ": $: expected \"steps\", \"tokens\" or \"epochs\" (the plan has no token ",
                                  "budget either), got none"));
}

// The mean input tokens of a padded sample of `train` (spec::mean_padded_sample); seq_len when
// packed. ConfigError for a source with no sample, and under padding for data whose samples hold
// no input, however the run's length is given.
double mean_sample_of(const spec::Plan& plan, const TrainConfig& config, const std::vector<DataSource>& train) {
  const int seq_len = plan.workload.seq_len;
  require_a_sample_each(train, seq_len, config.packing);
  if (config.packing != Packing::kPadded) return seq_len;
  const double mean_sample = spec::mean_padded_sample(padded_shares(train, seq_len));
  spec::require_padded_input(mean_sample, str_cat(config.origin.string(), ": $.data"));
  return mean_sample;
}

// The run's length: --steps, then TRAIN.json's steps, tokens or epochs, then the plan's token
// budget. A packed step holds global_batch × seq_len tokens; a padded one a sample per document,
// so a token budget divides by the mixture's `mean_sample` (mean_sample_of) and an epoch counts
// documents (spec::steps_for_epochs).
std::int64_t resolve_steps(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options,
                           const std::vector<DataSource>& train, double mean_sample) {
  require_run_length(plan, config, options);
  if (options.steps) return *options.steps;
  if (config.steps) return *config.steps;
  const bool padded = config.packing == Packing::kPadded;
  const int global_batch = plan.parallel.global_batch;
  const int seq_len = plan.workload.seq_len;
  if (config.epochs) {
    std::vector<spec::MixtureShare> shares;
    for (const auto& source : train) {
      shares.push_back({source.name, padded ? source.dataset->documents() : source.dataset->tokens(), source.weight});
    }
    return spec::steps_for_epochs(shares, *config.epochs, global_batch, seq_len, config.packing);
  }
  const std::int64_t budget = config.tokens ? *config.tokens : plan.workload.train_tokens;
  if (!padded) return spec::steps_for_tokens(budget, std::int64_t{global_batch} * seq_len);
  const auto what =
      config.tokens ? str_cat(config.origin.string(), ": $.tokens") : std::string("plan.json: $.workload.train_tokens");
  return spec::steps_for_padded_tokens(budget, global_batch, mean_sample, static_cast<int>(train.size()), what);
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

// The launch of this rank, once the plan is known to be one the executor runs; its log lines are
// prefixed with its rank.
LaunchInfo supported_launch(const spec::Plan& plan) {
  check_plan_runs(plan);
  const auto launch = launch_info_from_env();
  if (launch.distributed()) core::set_log_prefix(str_cat("r", launch.rank), launch.rank == 0);
  return launch;
}

// The rank's device (on CUDA each local rank its own, which NCCL's groups are then made on) and
// its compute threads: ranks on one host share its cores (without a limit each would start one
// thread per core).
torch::Device set_up_compute(const TrainConfig& config, const TrainOptions& options, const LaunchInfo& launch) {
  const auto device = pick_device(options.device.value_or(config.device), launch.local_rank, launch.local_world_size,
                                  launch.gpu_bound_per_task);
  if (config.threads > 0) {
    at::set_num_threads(config.threads);
  } else if (launch.local_world_size > 1) {
    const auto cores = static_cast<int>(std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, cores / launch.local_world_size));
  }
  return device;
}

// Rank 0 records the run in OUT (the plan; what `cpt doctor` needs to check the run against its
// configuration: a copy of TRAIN.json, which resolves its relative data paths and survives its
// deletion, and the schedule's length), finishes checkpoints an earlier run left half-written and
// prepares the inputs; the other ranks wait for it, then reuse them. COLLECTIVE over `world`.
RunInputs prepare_run_directory(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options,
                                bool rank0, Communicator& world) {
  require_run_length(plan, config, options);
  require_packing_the_model_takes(plan, config);
  std::optional<RunInputs> prepared;
  if (rank0) {
    core::create_output_directory(options.out_dir);
    spec::save_plan(plan, options.out_dir / "plan.json");
    if (fs::exists(config.origin)) {
      std::ifstream in(config.origin, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      core::write_file_atomic(options.out_dir / "train_config.json", text);
    }
    recover_unfinished_checkpoints(options.out_dir / "checkpoints");
    prepared = prepare_run_inputs(config, plan.model, options.out_dir);
  }
  world.barrier();
  if (!rank0) prepared = prepare_run_inputs(config, plan.model, options.out_dir);
  return std::move(*prepared);
}

// run.json: the file TRAIN.json was read from and the schedule's length (rank 0 writes it).
void record_run_length(const TrainConfig& config, const TrainOptions& options, std::int64_t total_steps) {
  const nlohmann::ordered_json run{{"config", fs::absolute(config.origin).string()}, {"total_steps", total_steps}};
  core::write_file_atomic(options.out_dir / "run.json", run.dump(2) + "\n");
}

LoaderOptions loader_options_of(const spec::Plan& plan, const TrainConfig& config) {
  LoaderOptions o;
  o.seq_len = plan.workload.seq_len;
  o.micro_batch = plan.parallel.micro_batch;
  o.seed = config.seed;
  o.packing = config.packing;
  o.width_multiple = plan.parallel.sequence_length_multiple();
  return o;
}

// One rank's training run: set up by the constructor, trained by train(). Its members are in the
// order they are built.
class RankRun {
 public:
  RankRun(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options);
  TrainSummary train();

 private:
  StepResult run_step(double lr);
  StepRecord step_once(RunMeter& meter, std::int64_t first_step, ModelStateBytes& state);
  fs::path save();
  void announce(std::int64_t first_step, std::int64_t end_step) const;
  TrainSummary finish(TrainSummary summary, const RunMeter& meter, const ModelStateBytes& state);

  const spec::Plan& plan_;
  const TrainConfig& config_;
  const TrainOptions& options_;
  const spec::ParallelConfig& par_;
  const LaunchInfo launch_;
  const bool rank0_;
  const spec::RankLayout layout_;
  const torch::Device device_;
  ProcessGroups groups_;
  RunInputs inputs_;
  const double mean_sample_;  // input tokens per sample: seq_len, or the padded mean (mean_sample_of)
  const std::int64_t total_steps_;
  // Context parallelism: each rank of the cp group holds S/cp tokens of every sequence
  // (context_parallel.h); gradients and ZeRO shards span dp × cp (groups_.replicas()).
  const TensorParallel tp_;
  const ContextParallel cp_;
  RankModel rank_;
  const FullStateGroups full_state_groups_;
  ContinualObjective continual_;
  OptimizerChoice choice_;
  const LoaderOptions loader_options_;
  DataLoader loader_;
  const LrSchedule schedule_;
  TrainerCounters counters_;
  KlGuard kl_guard_;
};

RankRun::RankRun(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options)
    : plan_(plan),
      config_(config),
      options_(options),
      par_(plan.parallel),
      launch_(supported_launch(plan)),
      rank0_(launch_.rank == 0),
      layout_(par_, plan.cluster.node.gpus_per_node),
      device_(set_up_compute(config, options, launch_)),
      groups_(make_process_groups(layout_, launch_, std::chrono::seconds(config.collective_timeout_s),
                                  device_.is_cuda(), spec::routed_experts_apart(plan.model, par_))),
      inputs_(prepare_run_directory(plan, config, options, rank0_, *groups_.world)),
      mean_sample_(mean_sample_of(plan, config, inputs_.train)),
      total_steps_(resolve_steps(plan, config, options, inputs_.train, mean_sample_)),
      tp_{groups_.tp.get(), par_.sequence_parallel},
      cp_{groups_.cp.get()},
      rank_(build_rank_model(plan, config, tp_, cp_, groups_, device_)),
      full_state_groups_{tp_,
                         groups_.pp.get(),
                         groups_.coord.dp == 0 && groups_.coord.cp == 0,
                         groups_.ep.get(),
                         !groups_.expert_dp || groups_.expert_dp->rank() == 0,
                         groups_.etp.get()},
      loader_options_(loader_options_of(plan, config)),
      loader_(inputs_.train, loader_options_),
      schedule_(run_lr_schedule(config, total_steps_)) {
  if (rank0_) record_run_length(config, options, total_steps_);
  estimate_or_load_ewc(continual_, plan, config, inputs_, rank_, groups_, full_state_groups_, options.out_dir, device_);
  choice_ = choose_step_optimizer(par_, config, rank_.named, groups_, rank_.first());
  const ParameterSplits splits = rank_.first()->splits();
  if (config.keep_optimizer_state) keep_base_optimizer_state(config, *choice_.optimizer, plan.model, splits, device_);
  // The teacher and the EWC anchor come from the starting weights, before any resume.
  attach_teacher_and_penalties(continual_, plan, config, rank_, choice_, tp_, cp_, device_);
  if (options.resume) {
    counters_ =
        resume_from_latest(options.out_dir / "checkpoints", plan.model, rank_, choice_, loader_, splits, device_);
  }
  kl_guard_ = {counters_.lr_scale, counters_.kl_steps_over_threshold};
}

// This rank's share of the step's global batch (dp contiguous shares, in sample order), through
// the step.
StepResult RankRun::run_step(double lr) {
  const int dp_rank = groups_.dp->rank();
  const std::int64_t per_rank = std::int64_t{par_.micro_batch} * par_.grad_accum();
  std::vector<Batch> micro;
  loader_.skip(dp_rank * per_rank);
  for (int m = 0; m < par_.grad_accum(); ++m) micro.push_back(context_parallel_slice(loader_.next(), cp_));
  loader_.skip((par_.dp - 1 - dp_rank) * per_rank);
  const Objective& objective = continual_.objective;
  auto& optimizer = *choice_.optimizer;
  auto r =
      rank_.pipeline
          ? train_step_pipelined(*rank_.pipeline, *rank_.schedule, optimizer, micro, lr, config_.grad_clip, device_,
                                 groups_.replicas(), objective.ewc, objective.ewc_lambda)
          : train_step(*rank_.first(), optimizer, micro, lr, config_.grad_clip, device_, groups_.replicas(), objective);
  if (continual_.ewc_on_shards) r.ewc_penalty = choice_.zero3->ewc_penalty();
  return r;
}

StepRecord RankRun::step_once(RunMeter& meter, std::int64_t first_step, ModelStateBytes& state) {
  const std::int64_t step = counters_.step;
  meter.begin_step(step == first_step);
  std::optional<StepProfiler> profiler;
  if (options_.profile_step && step == *options_.profile_step) profiler.emplace(device_.is_cuda());
  const auto t0 = Clock::now();
  const double lr = schedule_.at(step) * kl_guard_.lr_scale;
  const StepResult r = run_step(lr);
  if (config_.distill) kl_guard_.observe(step, r.kl, *config_.distill);
  state = r.state;
  if (!r.applied) {
    ++counters_.skipped;
    core::warn("step ", step, ": loss ", r.loss, ", gradient norm ", r.grad_norm, ": not finite, update skipped");
  }
  synchronize(device_);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool profiled = profiler.has_value();
  if (profiler) {
    write_step_profile(*profiler, options_.out_dir / "profile", step, launch_.rank, seconds);
    profiler.reset();
    groups_.world->barrier();  // ranks wrote for different times: start the next step together
  }
  // A padded step counts its real tokens (every one is a loss token), not its padding.
  const std::int64_t step_tokens =
      config_.packing == Packing::kPadded ? r.loss_tokens : std::int64_t{par_.global_batch} * plan_.workload.seq_len;
  counters_.tokens += step_tokens;
  // The first step of a process pays one-off allocation costs; a profiled step, the profiler's.
  meter.end_step(seconds, step_tokens, step > first_step && !profiled);
  ++counters_.step;
  StepRecord record{step,
                    r.loss,
                    lr,
                    r.grad_norm,
                    counters_.tokens,
                    step_tokens,
                    seconds,
                    peak_memory_bytes(device_),
                    !r.applied,
                    std::nullopt,
                    std::nullopt,
                    std::nullopt,
                    {}};
  if (config_.distill) record.kl = r.kl;
  record.experts = take_expert_load(rank_.chunks, groups_.replicas(), groups_.pp.get());
  // DeepSeek-V3's balancing between steps (Megatron-Core moves it in finalize_model_grads).
  if (plan_.model.moe.expert_bias && config_.expert_bias_update_rate > 0) {
    update_expert_biases(rank_.chunks, record.experts->pairs, config_.expert_bias_update_rate);
  }
  if (config_.ewc) record.ewc_penalty = r.ewc_penalty;
  for (std::size_t i = 0; i < loader_.sources().size(); ++i) {
    record.samples_by_source[loader_.sources()[i].name] = loader_.consumed()[i];
  }
  return record;
}

fs::path RankRun::save() {
  counters_.lr_scale = kl_guard_.lr_scale;
  counters_.kl_steps_over_threshold = kl_guard_.steps_over;
  return save_run_checkpoint(options_.out_dir / "checkpoints", counters_, plan_.model, rank_, choice_, loader_, config_,
                             schedule_, full_state_groups_, rank0_);
}

void RankRun::announce(std::int64_t first_step, std::int64_t end_step) const {
  const auto& model = plan_.model;
  core::info0("train: ", model.name, " (", model.num_params(), " parameters) on ", device_.str(), ", steps ",
              first_step, " -> ", total_steps_, ", ", par_.global_batch, " x ", plan_.workload.seq_len,
              " tokens per step (micro-batch ", par_.micro_batch, " x ", par_.grad_accum(), ")");
  if (config_.packing == Packing::kPadded) {
    core::info0("train: padded samples hold ", core::fixed(mean_sample_, 1),
                " input tokens on average; tokens and tokens_per_s count them, not the padding");
  }
  if (rank0_ && options_.profile_step && (*options_.profile_step < first_step || *options_.profile_step >= end_step)) {
    core::warn("--profile-step ", *options_.profile_step, ": this run trains steps ", first_step, " to ", end_step - 1,
               "; no step is profiled");
  }
}

TrainSummary RankRun::train() {
  const std::int64_t first_step = counters_.step;
  const std::int64_t end_step = std::min(total_steps_, options_.stop_at.value_or(total_steps_));
  RunLog log(options_.out_dir, first_step, total_steps_, rank0_, options_.progress && ::isatty(STDOUT_FILENO) != 0,
             config_.log_interval_steps);
  // Every rank evaluates where its replica's layers are collective over dp (ZeRO-3's gathers, the
  // experts' all-to-all and expert-tp's gathers); replica 0 alone otherwise.
  RunEvaluator evaluator(
      inputs_, loader_options_, device_, cp_, rank_,
      choice_.zero3 != nullptr || groups_.ep != nullptr || groups_.etp != nullptr || groups_.coord.dp == 0);
  // Step times, communication waits and the first step's counts (run_meter.h): measured.json.
  RunMeter meter(*groups_.clocks, device_.is_cpu());
  announce(first_step, end_step);
  if (config_.eval_at_start && first_step == 0 && evaluator.has_sets()) evaluator.evaluate(0, log);
  TrainSummary summary;
  summary.first_step = first_step;
  ModelStateBytes state;  // of the latest step
  const auto run_start = Clock::now();
  const StopRequest stop;
  while (counters_.step < end_step) {
    RankReporter::of_this_process().note_step(counters_.step +
                                              1);  // the step being trained, numbered as in metrics.jsonl
    const StepRecord record = step_once(meter, first_step, state);
    const std::int64_t step = counters_.step;
    summary.final_loss = record.loss;
    const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
    log.step(record, elapsed / static_cast<double>(step - first_step) * static_cast<double>(end_step - step));
    if (stop.agreed(*groups_.world)) {
      summary.stopped = true;
      core::info0("stop requested: ending at step ", step, " with a checkpoint (--resume continues)");
      break;
    }
    if (config_.eval_interval_steps > 0 && step % config_.eval_interval_steps == 0 && step < end_step) {
      evaluator.evaluate(step, log);
    }
    if (config_.checkpoint.interval_steps > 0 && step % config_.checkpoint.interval_steps == 0 && step < end_step) {
      save();
    }
  }
  log.end();
  // The closing evaluation, unless this run trained nothing (a resume of a finished run: its
  // evaluation at this step is on record already).
  if (evaluator.has_sets() && !summary.stopped && counters_.step > first_step) evaluator.evaluate(counters_.step, log);
  return finish(summary, meter, state);
}

TrainSummary RankRun::finish(TrainSummary summary, const RunMeter& meter, const ModelStateBytes& state) {
  summary.checkpoint = save();
  summary.last_step = counters_.step;
  summary.skipped_steps = counters_.skipped;
  summary.tokens_per_s = meter.tokens_per_s();
  RunFacts facts;
  facts.device = device_.str();
  facts.steps = counters_.step - summary.first_step;
  facts.skipped_steps = counters_.skipped;
  facts.final_loss = summary.final_loss;
  facts.dp_bucket_bytes = static_cast<std::int64_t>(config_.dp_bucket_mib * 1024 * 1024);
  facts.padded = config_.packing == Packing::kPadded;
  facts.state = state;
  facts.recipe = recipe_bytes(continual_, choice_);
  facts.peak_memory_bytes = peak_memory_bytes(device_);
  // A run that trained nothing measured nothing: the earlier run's measured.json stays.
  if (facts.steps > 0) {
    const auto measured = meter.finish(facts, *groups_.world, layout_);
    if (rank0_) spec::save_measured_run(options_.out_dir / "measured.json", measured);
  }
  groups_.world->barrier();  // every rank returns after the final checkpoint exists
  return summary;
}

}  // namespace

void check_plan_runs(const spec::Plan& plan, const std::string& origin) {
  if (const auto e = find_llama_family_error(plan.model)) throw core::ConfigError(str_cat(origin, ": $.model: ", *e));
  const auto& par = plan.parallel;
  if (par.cp > 1) {
    if (auto e = spec::find_sequence_split_error(plan.workload.seq_len, par.cp)) {
      throw core::ConfigError(str_cat(origin, ": $.parallel.cp: context parallelism: ", *e));
    }
  }
  if (auto gap = spec::find_executor_gap(par, plan.model, plan.workload.seq_len)) {
    throw core::ConfigError(str_cat(origin, ": $.parallel: ", spec::describe(*gap, par, plan.workload.seq_len)));
  }
  if (plan.workload.seq_len > plan.model.max_seq_len) {
    throw core::ConfigError(str_cat(origin, ": $.workload.seq_len: expected at most model ", plan.model.name,
                                    "'s max_seq_len ", plan.model.max_seq_len, ", got ", plan.workload.seq_len));
  }
}

TrainSummary train(const spec::Plan& plan, const TrainConfig& config, const TrainOptions& options) {
  RankRun run(plan, config, options);
  return run.train();
}

}  // namespace cpt::exec
