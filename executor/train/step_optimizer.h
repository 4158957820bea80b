#pragma once
// What happens to the gradients of a step between backward and the next forward, for every data
// layout: reduce them over the data-parallel group (or not), measure their global norm, clip, and
// apply AdamW — replicated (every rank updates everything; ZeRO-0) or sharded (ZeRO-1/2: each
// rank updates its slice of every gradient bucket, spec::ShardLayout's slice, and the slices are
// all-gathered). Both give the single-process step, and both save and load the same full
// optimizer state (AdamW::state()'s names), so checkpoints move between layouts.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/dist/communicator.h"
#include "executor/train/adamw.h"
#include "spec/gradient_buckets.h"

namespace cpt::exec {

using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

// The model-parallel groups over which this rank's parameters are only a part of the model, for
// the global gradient norm: squares summed over the tensor-, expert- and pipeline-parallel groups
// too, a parameter replicated over the tensor-parallel group (tensor_parallel.h) counted on its
// rank 0 only. Null groups: a group of one. (The routed experts' optimizer sums over etp, in `tp`,
// and ep; the rest of the model's over tp: optimizer_choice.cpp.)
struct ModelParallelNorm {
  Communicator* tp = nullptr;
  Communicator* pp = nullptr;
  Communicator* ep = nullptr;
  // Whether parameter `name`'s gradient counts on this rank.
  [[nodiscard]] bool counts(const std::string& name) const;
  // Σ of the squares over the groups (identity without them). COLLECTIVE over tp, ep and pp.
  [[nodiscard]] double sum_over_groups(double squares) const;
};

// Storage held once a step's gradients are in (after its last backward, before the update), by
// category, each storage counted once (measure/storage_bytes.h).
struct ModelStateBytes {
  std::int64_t weights = 0;             // the parameters (ZeRO-3: this rank's shards, and any gathered unit)
  std::int64_t grads = 0;               // the parameters' .grad and the optimizer's gradient buffers
  std::int64_t optimizer = 0;           // Adam moments (and master weights where kept)
  std::int64_t optimizer_counters = 0;  // step counters, one fp32 scalar per parameter (or segment)
};

// Storage the continual recipe holds on a rank (measured.json's memory_bytes.teacher and .ewc,
// which the cost model predicts): the teacher's weights (under ZeRO-3 the peak of its shards and
// gathered units), EWC's Fisher and anchor (under ZeRO-3 their slices).
struct RecipeBytes {
  std::int64_t teacher = 0;
  std::int64_t ewc = 0;
};

class StepOptimizer {
 public:
  virtual ~StepOptimizer() = default;
  // Called around the backward of microbatch i of the step's n.
  virtual void before_backward(int i, int n) = 0;
  virtual void after_backward(int i, int n) = 0;
  // After the last backward: the global L2 norm of the step's (summed) gradient. COLLECTIVE.
  virtual double grad_norm() = 0;
  // Multiplies the gradient by `scale` (clipping), applies AdamW at `lr`, clears the gradients.
  // COLLECTIVE.
  virtual void step(double lr, double scale) = 0;
  // Drops the step's gradients without an update (a skipped step).
  virtual void zero_grad() = 0;
  // What this rank holds now (call between the last backward and step()).
  [[nodiscard]] virtual ModelStateBytes state_bytes() const = 0;
  // The whole optimizer state, named as AdamW::state(). COLLECTIVE (sharded: an all-gather).
  virtual NamedParams full_state() = 0;
  // Loads a whole state (each rank keeps its part). ConfigError naming `origin` on a mismatch.
  virtual void load_full_state(const std::function<torch::Tensor(const std::string&)>& get,
                               const std::string& origin) = 0;
};

// ZeRO-0: AdamW on every rank; gradients all-reduced in buckets during the last backward.
std::unique_ptr<StepOptimizer> make_replicated_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                         Communicator& dp, std::int64_t bucket_bytes,
                                                         const ModelParallelNorm& mp = {});

// ZeRO-1/2 (train/zero_optimizer.cpp): each gradient bucket (spec::reverse_order_buckets) split
// over the group (spec::ShardLayout); optimizer state exists only for this rank's slices (and an
// fp32 master of them only with offload); buckets reduce-scatter while backward continues.
struct ZeroOptions {
  int stage = 1;  // 1: the step's accumulated gradient reduced once; 2: and only the shard kept
  std::int64_t bucket_bytes = spec::kDefaultGradientBucketBytes;  // gradient bucket (fp32)
  // Stage 2 reduces each microbatch's gradients as its backward produces them, holding only the
  // gradient shard and two buckets. That needs before/after_backward around every microbatch's
  // backward; under a pipeline schedule, whose microbatches' backward passes interleave, stage 2
  // accumulates whole gradients like stage 1 (false).
  bool reduce_each_microbatch = true;
  // The optimizer state (moments, an fp32 master of the shard, step counts) in host memory and the
  // update on the CPU, the gradient copied there and the updated shard back (DeepSpeed's
  // ZeRO-Offload; the plan's offload "optimizer").
  bool offload = false;
};
std::unique_ptr<StepOptimizer> make_zero_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                   Communicator& dp, const ZeroOptions& zero,
                                                   const ModelParallelNorm& mp = {});

// Under expert parallelism: `dense` for the parameters replicated over the data-parallel group and
// `experts` for the routed experts (replicated over expert-dp, split over ep), as one optimizer —
// each reduces, shards and updates its own; the gradient norm is both's, the full state both's
// names (train/expert_split_optimizer.cpp). `experts` is null on a pipeline stage without MoE
// layers: its part of the norm is then 0, still summed over `expert_norm`'s groups, as the ranks of
// the stages with experts sum theirs.
std::unique_ptr<StepOptimizer> make_expert_split_optimizer(std::unique_ptr<StepOptimizer> dense,
                                                           std::unique_ptr<StepOptimizer> experts,
                                                           const ModelParallelNorm& expert_norm);

}  // namespace cpt::exec
