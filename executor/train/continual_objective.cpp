#include "executor/train/continual_objective.h"

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/data/data_loader.h"
#include "executor/io/model_weights.h"
#include "executor/measure/storage_bytes.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

// Where this rank's parameters are summed and split (regularizers.h's EwcLayout).
EwcLayout ewc_layout(const spec::Plan& plan, const ProcessGroups& groups) {
  EwcLayout layout;
  layout.replicas = static_cast<double>(groups.replicas().size());
  layout.experts_apart = spec::routed_experts_apart(plan.model, plan.parallel);
  if (layout.experts_apart) {
    layout.expert_dp = groups.expert_dp.get();
    layout.expert_replicas = groups.expert_dp ? static_cast<double>(groups.expert_dp->size()) : 1.0;
    layout.ep = groups.ep.get();
    layout.etp = groups.etp.get();
    layout.sequence_copies = static_cast<double>(plan.parallel.dp);
  }
  return layout;
}

}  // namespace

void estimate_or_load_ewc(ContinualObjective& continual, const spec::Plan& plan, const TrainConfig& config,
                          const RunInputs& inputs, RankModel& rank, const ProcessGroups& groups,
                          const FullStateGroups& full_state_groups, const fs::path& out_dir,
                          const torch::Device& device) {
  if (!config.ewc) return;
  const EwcLayout layout = ewc_layout(plan, groups);
  const bool rank0 = groups.rank == 0;
  const auto file = out_dir / "ewc_fisher.safetensors";
  auto need = torch::tensor({rank0 && !fs::exists(file) ? 1.0 : 0.0}, torch::kFloat64);
  groups.world->broadcast(need, 0)->wait();  // rank 0 decides: a rank looking later would disagree
  // Replica 0's ranks, all of its context-parallel ranks included (their attention is collective);
  // every rank where the routed experts are apart from their layer (their dispatch spans the
  // replicas, EwcLayout).
  if (need.item<double>() > 0 && (groups.coord.dp == 0 || layout.experts_apart)) {
    LoaderOptions lo;
    lo.seq_len = plan.workload.seq_len;
    lo.micro_batch = plan.parallel.micro_batch;
    lo.seed = config.seed;
    lo.packing = config.packing;
    lo.width_multiple = plan.parallel.sequence_length_multiple();
    lo.shuffle = false;
    DataLoader ewc_loader({*inputs.ewc}, lo);
    const auto estimate = rank.pipeline
                              ? Ewc::estimate(*rank.pipeline, ewc_loader, config.ewc->sequences, device, layout)
                              : Ewc::estimate(*rank.first(), ewc_loader, config.ewc->sequences, device, layout);
    auto fisher = gather_full_tensors(estimate.fisher(), plan.model.vocab, full_state_groups);
    auto anchor = gather_full_tensors(estimate.anchor(), plan.model.vocab, full_state_groups);
    if (rank0) {
      const auto whole = Ewc::from(std::move(fisher), std::move(anchor));
      whole.save(file);
      core::info0("ewc: Fisher of the starting weights from ", config.ewc->sequences, " sequences of \"",
                  inputs.ewc->name, "\" (mean ", whole.mean_fisher(), ") -> ", file.string());
    }
  }
  groups.world->barrier();
  std::vector<LlamaModelImpl*> mine;
  for (auto& chunk : rank.chunks) mine.push_back(chunk.get());
  continual.ewc = Ewc::load(file, mine, device);
  continual.ewc->set_layout(layout);
}

void attach_teacher_and_penalties(ContinualObjective& continual, const spec::Plan& plan, const TrainConfig& config,
                                  RankModel& rank, const OptimizerChoice& choice, const TensorParallel& tp,
                                  const ContextParallel& cp, const torch::Device& device) {
  if (config.distill) {
    // Sharded like the student: the same tensor- and context-parallel splits and, under a
    // pipeline, the same stages on the same ranks (pipeline_executor.h).
    const auto source = config.distill->teacher.value_or(*config.init_from);
    std::vector<LlamaModel> teacher_chunks;
    std::string loaded;
    for (const auto& chunk : rank.chunks) {
      LlamaModel t(plan.model, chunk->shape(), tp, cp, chunk->ep());  // experts split like the student's
      loaded = load_model_weights(*t, source);
      t->to(device);
      teacher_chunks.push_back(std::move(t));
    }
    if (choice.zero3 == nullptr) {
      std::vector<torch::Tensor> weights;
      for (const auto& t : teacher_chunks) {
        for (const auto& p : t->parameters()) weights.push_back(p);
      }
      continual.teacher_bytes = storage_bytes(weights);
    }
    if (rank.pipeline) {
      rank.pipeline->set_teacher(std::move(teacher_chunks), config.distill->lambda);
    } else {
      if (choice.zero3 != nullptr) {
        // ZeRO-3: the teacher's parameters are sharded over the student's shard group and gathered
        // per block for its forward, as the student's are.
        NamedParams teacher_params;
        for (const auto& p : teacher_chunks.front()->named_parameters())
          teacher_params.emplace_back(p.key(), p.value());
        if (choice.expert_shard_group != nullptr) {
          auto [dense, experts] = split_routed_experts(teacher_params);
          continual.teacher_shards =
              make_expert_split_fully_sharded(make_fully_sharded_frozen(dense, *choice.shard_group),
                                              make_fully_sharded_frozen(experts, *choice.expert_shard_group));
        } else {
          continual.teacher_shards = make_fully_sharded_frozen(teacher_params, *choice.shard_group);
        }
        teacher_chunks.front()->set_parameter_residency(continual.teacher_shards.get());
        core::info0("distill: teacher sharded (ZeRO-3) over ", choice.shard_group->size(), " ranks");
      }
      continual.teacher.emplace(std::move(teacher_chunks.front()));
      continual.objective.teacher = &*continual.teacher;
      continual.objective.kl_lambda = config.distill->lambda;
    }
    core::info0("distill: teacher from ", source.string(), " (", loaded, "), lambda ", config.distill->lambda);
  }
  if (!continual.ewc) return;
  const double lambda = config.ewc->lambda;
  if (rank.pipeline) rank.pipeline->set_ewc(&*continual.ewc, lambda);
  if (choice.zero3 != nullptr) {
    // ZeRO-3 holds the parameters as shards outside forward: the penalty works on them there.
    CPT_CHECK(!rank.pipeline, "ZeRO-3 with a pipeline: the executor refuses it before training");
    choice.zero3->set_ewc(continual.ewc->fisher(), continual.ewc->anchor(), lambda);
    continual.ewc.reset();  // the shards keep their slices: the whole tensors were 8 bytes a parameter more
    continual.ewc_on_shards = true;
  } else {
    continual.objective.ewc = &*continual.ewc;  // the pipelined step is given it too
    continual.objective.ewc_lambda = lambda;
  }
}

RecipeBytes recipe_bytes(const ContinualObjective& continual, const OptimizerChoice& choice) {
  RecipeBytes bytes;
  bytes.teacher = continual.teacher_shards ? continual.teacher_shards->state_bytes().weights : continual.teacher_bytes;
  if (continual.ewc_on_shards) {
    bytes.ewc = choice.zero3->ewc_bytes();
  } else if (continual.ewc) {
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, t] : continual.ewc->fisher()) tensors.push_back(t);
    for (const auto& [name, t] : continual.ewc->anchor()) tensors.push_back(t);
    bytes.ewc = storage_bytes(tensors);
  }
  return bytes;
}

void keep_base_optimizer_state(const TrainConfig& config, StepOptimizer& optimizer, const spec::ModelSpec& model,
                               const ParameterSplits& splits, const torch::Device& device) {
  const auto& source = *config.init_from;
  if (is_hf_directory(source)) {
    throw core::ConfigError(str_cat(config.origin.string(), ": init_optimizer \"keep\": ", source.string(),
                                    " is a Hugging Face directory, which holds no optimizer state"));
  }
  const auto base = Checkpoint::open(source);
  if (!base.has_optimizer()) {
    throw core::ConfigError(
        str_cat(config.origin.string(), ": init_optimizer \"keep\": ", source.string(), " holds no optimizer state"));
  }
  const auto opt = base.optimizer();
  optimizer.load_full_state(
      [&](const std::string& n) {
        return shard_of_full_tensor(n, opt.load(n, torch::kFloat32), model.vocab, splits).contiguous().to(device);
      },
      source.string());
  core::info0("init: optimizer state kept from ", source.string(), " (step ", base.step(), ")");
}

LrSchedule run_lr_schedule(const TrainConfig& config, std::int64_t total_steps) {
  LrSchedule schedule = config.lr;
  schedule.total_steps = total_steps;
  if (config.lr_warmup_fraction) {
    schedule.warmup_steps = std::llround(*config.lr_warmup_fraction * static_cast<double>(total_steps));
  }
  if (!config.lr_peak_fraction) return schedule;
  // A fraction of the peak of the run that wrote init_from, which its checkpoint records.
  const auto& source = *config.init_from;
  const auto no_peak = [&](const std::string& why) {
    return core::ConfigError(
        str_cat(config.origin.string(), ": lr.peak_fraction: ", source.string(), " ", why, "; give lr.peak instead"));
  };
  if (is_hf_directory(source)) throw no_peak("is a Hugging Face directory, which records no learning rate");
  const auto base = Checkpoint::open(source);
  if (!base.trainer_state().contains("lr_peak")) throw no_peak("records no peak learning rate");
  const double base_peak = base.trainer_state()["lr_peak"].get<double>();
  schedule.peak = *config.lr_peak_fraction * base_peak;
  core::info0("lr: peak ", schedule.peak, " = ", *config.lr_peak_fraction, " x the base run's ", base_peak, ", warmup ",
              schedule.warmup_steps, " steps");
  return schedule;
}

}  // namespace cpt::exec
