#pragma once
// This rank's part of the model: its pipeline stages (chunk c = stage c·pp + pp rank), each split
// over the tensor-parallel group (tensor_parallel.h), holding its context-parallel share of the
// sequence (context_parallel.h) and its share of the routed experts (expert_parallel.h); initialised from the seed,
// then from TRAIN.json's init_from; on the device, with the plan's recomputation. With pp > 1, the pipeline executor
// over the chunks and the plan's schedule.
#include <optional>
#include <vector>

#include "executor/dist/process_groups.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/pipeline_executor.h"
#include "executor/parallel/tensor_parallel.h"
#include "executor/train/step_optimizer.h"
#include "executor/train/train_config.h"
#include "spec/pipeline_schedule.h"
#include "spec/plan.h"

namespace cpt::exec {

struct RankModel {
  std::vector<LlamaModel> chunks;
  std::optional<PipelineExecutor> pipeline;        // pp > 1
  std::optional<spec::PipelineSchedule> schedule;  // pp > 1
  NamedParams named;                               // every chunk's parameters, in chunk order
  NamedParams buffers;                             // every chunk's buffers (the expert biases), saved with them
  // The whole model when pp = 1 (the first chunk otherwise).
  [[nodiscard]] LlamaModel& first() { return chunks.front(); }
};

RankModel build_rank_model(const spec::Plan& plan, const TrainConfig& config, const TensorParallel& tp,
                           const ContextParallel& cp, const ProcessGroups& groups, const torch::Device& device);

}  // namespace cpt::exec
