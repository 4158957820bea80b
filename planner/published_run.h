#pragma once
// A published, measured training run (one line of a runs.jsonl file in the format of
// ../shared/validation/published_runs/README.md: llm-foundry's FSDP tables, NeMo and
// Megatron-Bridge rows) as cpt's own vocabulary: the model, the GPUs, the parallel configuration,
// the precision and what was measured. Where a row leaves a value out ("not stated", null), the
// value cpt assumes is recorded in `assumptions`, never silently filled; a row cpt cannot express
// says why in `not_modelled`.

#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/runtime.h"
#include "spec/token_dispatcher.h"

namespace cpt::planner {

struct PublishedRun {
  std::string id;
  // Rows whose errors are reported together: the source, the GPU class and the precision
  // ("llm-foundry A100-40GB bf16").
  std::string group;
  std::string gpu;  // the hardware catalog's name ("a100-40g", "h100")
  int gpus = 0;
  spec::ModelSpec model;
  spec::ParallelConfig parallel;
  int seq_len = 0;
  spec::Precision precision = spec::Precision::kBf16;
  // The software that ran it: Megatron-LM for NeMo's and Megatron-Bridge's rows (Megatron-FSDP
  // included), PyTorch FSDP where the row names a torch FSDP sharding strategy (llm-foundry).
  spec::Runtime runtime = spec::Runtime::kMegatron;
  // The recipe's settings where its source states them (cost::CostModelOptions' fields of the same
  // names); unset, the runtime's.
  std::optional<bool> dropout;
  bool fused_cross_entropy = false;
  std::optional<bool> fp32_main_grads;
  // The row's "parallel"."moe_dispatcher" (spec/token_dispatcher.h); absent: the all-to-all.
  spec::TokenDispatcher moe_dispatcher = spec::TokenDispatcher::kAllToAll;
  // What was measured: tokens per second per GPU where the row has it, else the source's model
  // TFLOP/s per GPU (NVIDIA's convention: model FLOPs without recomputation).
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> model_tflops_per_gpu;
  std::vector<std::string> assumptions;
  std::optional<std::string> not_modelled;
};

// Every line of `path`. Throws core::ConfigError naming the file and line for a line that is not a
// JSON object with an "id", or the file when it is not one or holds no run; a row cpt cannot
// express is returned with `not_modelled` set.
std::vector<PublishedRun> read_published_runs(const std::filesystem::path& path);
// The same from `lines`, named `origin` in errors.
std::vector<PublishedRun> read_published_runs(std::istream& lines, const std::string& origin);

}  // namespace cpt::planner
