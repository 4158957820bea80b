#include "executor/train/rank_model.h"

#include "core/log.h"
#include "executor/io/model_weights.h"

namespace cpt::exec {

RankModel build_rank_model(const spec::Plan& plan, const TrainConfig& config, const TensorParallel& tp,
                           const ContextParallel& cp, const ProcessGroups& groups, const torch::Device& device) {
  const auto& par = plan.parallel;
  RankModel rank;
  for (const int stage : plan.stages.stages_of_rank(groups.coord.pp)) {
    StageShape shape;
    shape.embedding = stage == 0;
    shape.first_layer = plan.stages.first_layer(stage);
    shape.last_layer = shape.first_layer + plan.stages.layers_in(stage);
    shape.head = stage == plan.stages.num_stages() - 1;
    rank.chunks.emplace_back(plan.model, shape, tp, cp,
                             ExpertParallel{groups.ep.get(), groups.etp.get(), groups.ep_etp.get()});
  }
  for (auto& chunk : rank.chunks) {
    chunk->init_weights(config.seed);
    if (config.init_from) {
      const auto loaded = load_model_weights(*chunk, *config.init_from);
      if (&chunk == &rank.chunks.front())
        core::info0("init: weights from ", config.init_from->string(), " (", loaded, ")");
    }
    chunk->to(device);
    chunk->set_recompute(par.recompute);
    // The objective averages each MoE layer's auxiliary loss over the step's microbatches on every
    // data-parallel rank: on sequence shards (sp, cp) each rank's term covers its own tokens of the
    // microbatch's loss, and the router's gradient is summed over them (model/moe_mlp.h).
    chunk->set_router_aux_loss_scale(config.router_aux_loss / static_cast<double>(par.grad_accum() * par.dp));
    chunk->set_router_aux_loss_per_sequence(config.router_aux_loss_per_sequence);
  }
  if (par.pp > 1) {
    rank.pipeline.emplace(rank.chunks, plan.stages.num_stages(), *groups.pp);
    rank.schedule = spec::make_schedule(par.schedule, par.pp, par.virtual_stages, par.grad_accum());
    if (par.schedule == spec::ScheduleKind::kZeroBubbleH1) {
      core::info0("pipeline: zb_h1 runs its schedule with the backward unsplit (each I does B, each W nothing)");
    }
  }
  for (auto& chunk : rank.chunks) {
    for (const auto& p : chunk->named_parameters()) rank.named.emplace_back(p.key(), p.value());
    for (const auto& b : chunk->named_buffers()) rank.buffers.emplace_back(b.key(), b.value());
  }
  return rank;
}

}  // namespace cpt::exec
