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
#include "executor/train/run_meter.h"
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

// The parameters in the order data parallelism buckets them (spec/parameter_order.h: the reverse
// of it is the order backward produces their gradients).
std::vector<std::pair<std::string, torch::Tensor>> in_gradient_order(std::vector<std::pair<std::string, torch::Tensor>> named) {
  std::stable_sort(named.begin(), named.end(), [](const auto& a, const auto& b) {
    return spec::gradient_order_key(a.first) < spec::gradient_order_key(b.first);
  });
  return named;
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

  // This rank's part of the model: its pipeline stages (chunk c = stage c·pp + pp rank), each
  // split over the tensor-parallel group (tensor_parallel.h).
  const TensorParallel tp{groups.tp.get(), par.sequence_parallel};
  // Context parallelism: each rank of the cp group holds S/cp tokens of every sequence
  // (context_parallel.h); gradients and ZeRO shards span dp × cp (groups.replicas()).
  const ContextParallel cp{groups.cp.get()};
  Communicator& replicas = groups.replicas();
  const int pp_rank = groups.coord.pp;
  std::vector<LlamaModel> chunks;
  for (const int stage : plan.stages.stages_of_rank(pp_rank)) {
    StageShape shape;
    shape.embedding = stage == 0;
    shape.first_layer = plan.stages.first_layer(stage);
    shape.last_layer = shape.first_layer + plan.stages.layers_in(stage);
    shape.head = stage == plan.stages.num_stages() - 1;
    chunks.emplace_back(spec, shape, tp, cp);
  }
  for (auto& chunk : chunks) {
    chunk->init_weights(config.seed);
    if (config.init_from) {
      const auto loaded = load_model_weights(*chunk, *config.init_from);
      if (&chunk == &chunks.front()) core::info0("init: weights from ", config.init_from->string(), " (", loaded, ")");
    }
    chunk->to(device);
    chunk->set_recompute(par.recompute);
  }
  auto& model = chunks.front();  // the whole model when pp = 1
  std::optional<PipelineExecutor> pipeline;
  std::optional<spec::PipelineSchedule> pipeline_schedule;
  if (par.pp > 1) {
    pipeline.emplace(chunks, plan.stages.num_stages(), *groups.pp);
    pipeline_schedule = spec::make_schedule(par.schedule, par.pp, par.virtual_stages, par.grad_accum());
    if (par.schedule == spec::ScheduleKind::kZeroBubbleH1) {
      core::info0("pipeline: zb_h1 runs its schedule with the backward unsplit (each I does B, each W nothing)");
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& chunk : chunks) {
    for (const auto& p : chunk->named_parameters()) named.emplace_back(p.key(), p.value());
  }
  const ModelParallelNorm norm_groups{groups.tp.get(), groups.pp.get()};
  // ZeRO-0: every rank updates everything; ZeRO-1/2: each rank its slice (step_optimizer.h);
  // ZeRO-3: each rank holds its slice of everything, parameters gathered per block
  // (parallel/fully_sharded.h), over the node's part of the dp group with hybrid sharding.
  const FullStateGroups full_state_groups{tp, groups.pp.get(), groups.coord.dp == 0 && groups.coord.cp == 0};
  // EWC's Fisher and anchor, from the starting weights, before the optimizer turns every .grad into a
  // view of its buffers (the estimate's own backward passes must not touch them). Estimated by
  // replica 0's ranks together (a tensor-parallel, context-parallel or pipelined model's loss is
  // collective), gathered whole to rank 0 (tensor shards and pipeline stages, full_state.h) and
  // written there, and cut into this rank's shards of its chunks when loaded.
  std::optional<Ewc> ewc;
  if (config.ewc) {
    const auto file = options.out_dir / "ewc_fisher.safetensors";
    auto need = torch::tensor({rank0 && !fs::exists(file) ? 1.0 : 0.0}, torch::kFloat64);
    groups.world->broadcast(need, 0)->wait();  // rank 0 decides: a rank looking later would disagree
    // Replica 0's ranks, all of its context-parallel ranks included (their attention is collective).
    if (need.item<double>() > 0 && groups.coord.dp == 0) {
      LoaderOptions lo;
      lo.seq_len = seq_len;
      lo.micro_batch = par.micro_batch;
      lo.seed = config.seed;
      lo.packing = config.packing;
      lo.shuffle = false;
      DataLoader ewc_loader({*inputs.ewc}, lo);
      const auto estimate = pipeline ? Ewc::estimate(*pipeline, ewc_loader, config.ewc->sequences, device)
                                     : Ewc::estimate(*model, ewc_loader, config.ewc->sequences, device);
      auto fisher = gather_full_tensors(estimate.fisher(), spec.vocab, full_state_groups);
      auto anchor = gather_full_tensors(estimate.anchor(), spec.vocab, full_state_groups);
      if (rank0) {
        const auto whole = Ewc::from(std::move(fisher), std::move(anchor));
        whole.save(file);
        core::info0("ewc: Fisher of the starting weights from ", config.ewc->sequences, " sequences of \"",
                    inputs.ewc->name, "\" (mean ", whole.mean_fisher(), ") -> ", file.string());
      }
    }
    groups.world->barrier();
    std::vector<LlamaModelImpl*> mine;
    for (auto& chunk : chunks) mine.push_back(chunk.get());
    ewc = Ewc::load(file, mine, device);
  }
  std::unique_ptr<StepOptimizer> optimizer;
  FullyShardedModel* zero3 = nullptr;
  // ZeRO-3's shard group: inside a node under hybrid sharding, else every replica (dp × cp).
  const bool hybrid = par.hybrid_shard && groups.dp_shard;
  Communicator& shard_group = hybrid ? *groups.dp_shard : replicas;
  if (par.zero_stage == 3) {
    auto fs = make_fully_sharded(named, config.optimizer, shard_group, hybrid ? groups.dp_replicate.get() : nullptr,
                                 norm_groups, par.offload == spec::Offload::kOptimizer);
    zero3 = fs.get();
    model->set_parameter_residency(zero3);
    if (hybrid) {
      core::info0("zero3: hybrid sharding, parameters sharded over ", groups.dp_shard->size(), " ranks (",
                  groups.dp_shard->name(), "), replicated over ", groups.dp_replicate->size(), " (",
                  groups.dp_replicate->name(), ")");
    }
    optimizer = std::move(fs);
  } else if (par.zero_stage == 0) {
    optimizer = make_replicated_optimizer(in_gradient_order(named), config.optimizer, replicas,
                                          static_cast<std::int64_t>(config.dp_bucket_mib * 1024 * 1024), norm_groups);
  } else {
    ZeroOptions zero;
    zero.stage = par.zero_stage;
    zero.bucket_bytes = static_cast<std::int64_t>(config.dp_bucket_mib * 1024 * 1024);
    zero.reduce_each_microbatch = spec::executor_zero2_reduces_each_microbatch(par);
    zero.offload = par.offload == spec::Offload::kOptimizer;
    optimizer = make_zero_optimizer(in_gradient_order(named), config.optimizer, replicas, zero, norm_groups);
  }
  if (config.keep_optimizer_state) {
    // Continual pre-training that keeps the base run's AdamW moments and step count.
    const auto& source = *config.init_from;
    if (is_hf_directory(source)) {
      throw core::ConfigError(str_cat(config.origin.string(), ": init_optimizer \"keep\": ", source.string(),
                                      " is a Hugging Face directory, which holds no optimizer state"));
    }
    const auto base = Checkpoint::open(source);
    if (!base.has_optimizer()) {
      throw core::ConfigError(str_cat(config.origin.string(), ": init_optimizer \"keep\": ", source.string(),
                                      " holds no optimizer state"));
    }
    const auto opt = base.optimizer();
    optimizer->load_full_state(
        [&](const std::string& n) {
          return shard_of_full_tensor(n, opt.load(n, torch::kFloat32), spec.vocab, tp).contiguous().to(device);
        },
        source.string());
    core::info0("init: optimizer state kept from ", source.string(), " (step ", base.step(), ")");
  }
  // Evaluation runs on replica 0 (all its cp ranks: attention gathers over them), or on every rank
  // under ZeRO-3 (its gathers span the dp group).
  const bool evaluates = zero3 != nullptr || groups.coord.dp == 0;
  // Each step's global batch is split in dp contiguous shares, in sample order.
  const int dp_rank = groups.dp->rank();
  const std::int64_t per_rank = std::int64_t{par.micro_batch} * par.grad_accum();

  LrSchedule schedule = config.lr;
  schedule.total_steps = total_steps;
  if (config.lr_warmup_fraction) {
    schedule.warmup_steps = std::llround(*config.lr_warmup_fraction * static_cast<double>(total_steps));
  }
  if (config.lr_peak_fraction) {
    // A fraction of the peak of the run that wrote init_from, which its checkpoint records.
    const auto& source = *config.init_from;
    const auto no_peak = [&](const std::string& why) {
      return core::ConfigError(str_cat(config.origin.string(), ": lr.peak_fraction: ", source.string(), " ", why,
                                       "; give lr.peak instead"));
    };
    if (is_hf_directory(source)) throw no_peak("is a Hugging Face directory, which records no learning rate");
    const auto base = Checkpoint::open(source);
    if (!base.trainer_state().contains("lr_peak")) throw no_peak("records no peak learning rate");
    const double base_peak = base.trainer_state()["lr_peak"].get<double>();
    schedule.peak = *config.lr_peak_fraction * base_peak;
    core::info0("lr: peak ", schedule.peak, " = ", *config.lr_peak_fraction, " x the base run's ", base_peak,
                ", warmup ", schedule.warmup_steps, " steps");
  }
  LoaderOptions loader_options;
  loader_options.seq_len = seq_len;
  loader_options.micro_batch = par.micro_batch;
  loader_options.seed = config.seed;
  loader_options.packing = config.packing;
  DataLoader loader(inputs.train, loader_options);

  // Continual pre-training objective: the frozen teacher and the EWC anchor, both from the starting
  // weights (before any resume).
  Objective objective;
  std::unique_ptr<FullyShardedModel> teacher_shards;  // ZeRO-3: the teacher's shards (outlives it)
  std::optional<Teacher> teacher;
  if (config.distill) {
    // Sharded like the student: the same tensor- and context-parallel splits and, under a
    // pipeline, the same stages on the same ranks (pipeline_executor.h).
    const auto source = config.distill->teacher.value_or(*config.init_from);
    std::vector<LlamaModel> teacher_chunks;
    std::string loaded;
    for (const auto& chunk : chunks) {
      LlamaModel t(spec, chunk->shape(), tp, cp);
      loaded = load_model_weights(*t, source);
      t->to(device);
      teacher_chunks.push_back(std::move(t));
    }
    if (pipeline) {
      pipeline->set_teacher(std::move(teacher_chunks), config.distill->lambda);
    } else {
      if (zero3 != nullptr) {
        // ZeRO-3: the teacher's parameters are sharded over the student's shard group and gathered
        // per block for its forward, as the student's are.
        NamedParams teacher_params;
        for (const auto& p : teacher_chunks.front()->named_parameters()) teacher_params.emplace_back(p.key(), p.value());
        teacher_shards = make_fully_sharded_frozen(teacher_params, shard_group);
        teacher_chunks.front()->set_parameter_residency(teacher_shards.get());
        core::info0("distill: teacher sharded (ZeRO-3) over ", shard_group.size(), " ranks");
      }
      teacher.emplace(std::move(teacher_chunks.front()));
      objective.teacher = &*teacher;
      objective.kl_lambda = config.distill->lambda;
    }
    core::info0("distill: teacher from ", source.string(), " (", loaded, "), lambda ", config.distill->lambda);
  }
  if (ewc && pipeline) pipeline->set_ewc(&*ewc, config.ewc->lambda, static_cast<double>(replicas.size()));
  // ZeRO-3 holds the parameters as shards outside forward: the penalty works on them there.
  if (ewc && zero3 != nullptr) zero3->set_ewc(ewc->fisher(), ewc->anchor(), config.ewc->lambda);
  if (ewc && zero3 == nullptr) {
    objective.ewc = &*ewc;
    objective.ewc_lambda = config.ewc->lambda;
  }
  double lr_scale = 1.0;      // the KL guard's cut of the learning rate
  std::int64_t kl_over = 0;   // consecutive steps with KL above the guard's threshold

  const auto ckpt_root = options.out_dir / "checkpoints";
  std::int64_t step = 0, tokens_seen = 0, skipped = 0;
  if (options.resume) {
    if (auto ckpt = latest_valid_checkpoint(ckpt_root)) {
      if (!(ckpt->model() == spec)) {
        throw core::ConfigError(str_cat(ckpt->dir().string(), ": a checkpoint of model ", ckpt->model().name,
                                        ", which differs from the plan's model ", spec.name));
      }
      if (zero3 != nullptr) zero3->gather_all();
      for (auto& chunk : chunks) load_model_weights(*chunk, ckpt->dir());
      if (zero3 != nullptr) zero3->reshard_from_params();
      if (!ckpt->has_optimizer()) throw core::ConfigError(str_cat(ckpt->dir().string(), ": no optimizer state to resume"));
      const auto opt = ckpt->optimizer();
      optimizer->load_full_state(
          [&](const std::string& n) {
            return shard_of_full_tensor(n, opt.load(n, torch::kFloat32), spec.vocab, tp).contiguous().to(device);
          },
          ckpt->dir().string());
      const auto& st = ckpt->trainer_state();
      step = st.at("step").get<std::int64_t>();
      tokens_seen = st.at("tokens").get<std::int64_t>();
      skipped = st.value("skipped_steps", std::int64_t{0});
      lr_scale = st.value("lr_scale", 1.0);
      kl_over = st.value("kl_steps_over_threshold", std::int64_t{0});
      loader.restore(st.at("data"), ckpt->dir().string());
      if (auto rng = ckpt->rng(); rng && rng->contains("cpu")) {
        auto gen = at::detail::getDefaultCPUGenerator();
        gen.set_state(rng->load("cpu", torch::kUInt8));
      }
      core::info0("resume: from ", ckpt->dir().string(), " at step ", step);
    } else if (has_step_directories(ckpt_root)) {
      // Starting over would overwrite the run's history with a run it did not ask for.
      throw core::RuntimeError(str_cat("--resume: no checkpoint in ", ckpt_root.string(),
                                       " verifies (each is named above); nothing was changed"));
    } else {
      core::info0("resume: no checkpoint in ", ckpt_root.string(), " yet; starting at step 0");
    }
  }
  const auto first_step = step;
  std::optional<JsonlWriter> metrics, eval_log;  // rank 0 only
  if (rank0) {
    truncate_jsonl(options.out_dir / "metrics.jsonl", step);
    truncate_jsonl(options.out_dir / "eval.jsonl", step);
    metrics.emplace(options.out_dir / "metrics.jsonl");
    eval_log.emplace(options.out_dir / "eval.jsonl");
  }

  auto save = [&](std::int64_t at_step) -> fs::path {
    // COLLECTIVE: a sharded optimizer gathers its state over dp; tensor-parallel shards and
    // pipeline stages are gathered to rank 0, which writes whole tensors (full_state.h).
    auto state = gather_full_tensors(optimizer->full_state(), spec.vocab, full_state_groups);
    if (zero3 != nullptr) zero3->gather_all();
    auto weights = gather_full_tensors(named, spec.vocab, full_state_groups);
    if (zero3 != nullptr) {
      for (auto& [name, t] : weights) t = t.detach().clone();  // released next: keep a copy
      zero3->release_all();
    }
    if (!rank0) return ckpt_root / checkpoint_dir_name(at_step);
    CheckpointContents c;
    c.step = at_step;
    c.model = spec;
    c.weights = std::move(weights);
    c.optimizer = std::move(state);
    c.rng.emplace_back("cpu", at::detail::getDefaultCPUGenerator().get_state());
    c.trainer_state = {{"step", at_step},       {"tokens", tokens_seen},       {"skipped_steps", skipped},
                       {"data", loader.state()}, {"seed", config.seed},        {"lr_schedule", to_string(schedule.kind)},
                       {"lr_peak", schedule.peak},
                       {"lr_scale", lr_scale},   {"kl_steps_over_threshold", kl_over}};
    const auto dir = write_checkpoint(ckpt_root, c);
    prune_checkpoints(ckpt_root, config.checkpoint.keep_last, dir);
    return dir;
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
    auto r = pipeline ? train_step_pipelined(*pipeline, *pipeline_schedule, *optimizer, micro, lr, config.grad_clip,
                                                   device, replicas, objective.ewc, objective.ewc_lambda)
                            : train_step(*model, *optimizer, micro, lr, config.grad_clip, device, replicas, objective);
    if (zero3 != nullptr && ewc) r.ewc_penalty = zero3->ewc_penalty();
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
    if (config.eval_interval_steps > 0 && step % config.eval_interval_steps == 0 && step < end_step) evaluate(step);
    if (config.checkpoint.interval_steps > 0 && step % config.checkpoint.interval_steps == 0 && step < end_step) {
      save(step);
    }
  }
  if (bar) std::printf("\n");
  if (!inputs.eval.empty()) evaluate(step);
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
