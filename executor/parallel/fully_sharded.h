#pragma once
// ZeRO-3 (Rajbhandari et al. 2020, P_os+g+p; PyTorch FSDP's FULL_SHARD) and hybrid sharding
// (FSDP's HYBRID_SHARD, the plan's `hsdp`): every parameter, gradient and optimizer state is split
// over the shard group, and a unit's parameters are whole only while the unit runs.
//
// Units: each decoder block, and a root unit (embedding, final norm, LM head). A unit's parameters
// are one flat vector (registration order) split by spec::ShardLayout; this rank keeps its slice
// (fp32, updated in place by AdamW) and the slices of the gradient and of the two moments.
//   forward   before a block: all-gather its slices and point its parameters at the whole vector,
//             and start the next block's all-gather (prefetch, asynchronous, so it runs behind this
//             block's computation); after it: release them (the parameters become empty), and
//             hook the block's output so that its gradient, when it arrives, first gathers the
//             block again and prefetches the one before it. The root unit is gathered for the
//             whole forward and backward of a microbatch.
//   backward  the gathered unit's parameters get .grad views into one flat gradient buffer;
//             once all of a unit's gradients are in (post-accumulate-grad hooks), the buffer is
//             reduce-scattered asynchronously and the parameters released. After the microbatch's
//             backward each reduced slice is added into the gradient shard (with hybrid sharding
//             first all-reduced over the replicate group: the same shard on the other nodes).
//   step      global norm from the gradient shards, fused AdamW on the slices.
// Memory between steps: 4Ψ/N weights + 4Ψ/N gradients + 8Ψ/N moments; during a step, plus the
// root unit and two blocks whole (the running one and the prefetched one), and in backward up to
// two whole gradient buffers (one reducing, one filling). state_bytes() reports the step's peak
// of weights and of gradients. Over a group of one (N = 1: the routed experts where expert-dp is 1)
// the shard is the whole unit: used in place, no gathered copy, gradients accumulated into it.
#include <memory>
#include <string>
#include <vector>

#include "executor/dist/communicator.h"
#include "executor/model/parameter_residency.h"
#include "executor/train/adamw.h"
#include "executor/train/step_optimizer.h"

namespace cpt::exec {

class FullyShardedModel;

// Shards `params` (a whole model's, HF names "layers.<i>.*" for blocks) over `shard`; `replicate`:
// the hybrid-sharding replicate group, or null. The parameters are released on return (their data
// empty) until a forward gathers them. Install the result as the model's ParameterResidency and use
// it as its StepOptimizer.
// `offload_optimizer`: the moments, a fp32 master of the shard and the step counts live in host
// memory and AdamW runs on the CPU (ZeRO-Offload with ZeRO-3, the plan's `offload: optimizer`);
// the updated shard is copied back for the next all-gathers.
std::unique_ptr<FullyShardedModel> make_fully_sharded(const NamedParams& params, const AdamWOptions& options,
                                                      Communicator& shard, Communicator* replicate,
                                                      const ModelParallelNorm& mp, bool offload_optimizer = false);

// The same for a frozen model (KL distillation's teacher under ZeRO-3): its parameters sharded and
// gathered per unit for forward exactly as the student's, without gradients or optimizer state.
// Install it as the model's ParameterResidency; its StepOptimizer side must not be used.
std::unique_ptr<FullyShardedModel> make_fully_sharded_frozen(const NamedParams& params, Communicator& shard);

// ZeRO-3 of a model whose routed experts are apart from their layer (spec::routed_experts_apart):
// `dense` shards the other parameters over the replicas, `experts` the routed experts over
// expert-dp (the ranks holding the same experts; its norm over ep and pp), and the result is both:
// a block's two units gathered, released and reduced together, the gradient norm both's, the full
// state both's names (parallel/expert_split_sharded.cpp).
std::unique_ptr<FullyShardedModel> make_expert_split_fully_sharded(std::unique_ptr<FullyShardedModel> dense,
                                                                   std::unique_ptr<FullyShardedModel> experts);

class FullyShardedModel : public ParameterResidency, public StepOptimizer {
 public:
  // EWC on the shards (regularizers.h): `fisher` and `anchor` hold this rank's tensor-parallel
  // parameters by name (their full shapes before ZeRO sharding); each unit keeps its slice of them.
  // After the step's last backward the penalty's gradient λ·F·(θ − θ*) is added to the gradient
  // shards (once: the shards are already summed over the group), and ewc_penalty() reports the
  // whole model's λ/2·Σ F (θ − θ*)² at the weights before the update.
  virtual void set_ewc(const NamedParams& fisher, const NamedParams& anchor, double lambda) = 0;
  [[nodiscard]] virtual double ewc_penalty() const = 0;
  // Storage of this rank's Fisher and anchor slices (0 without EWC).
  [[nodiscard]] virtual std::int64_t ewc_bytes() const = 0;
  // Gathers every unit (COLLECTIVE over the shard group): the parameters are whole, e.g. to save
  // or load them; then release_all(), or reshard_from_params() after writing new values into them.
  virtual void gather_all() = 0;
  virtual void release_all() = 0;
  virtual void reshard_from_params() = 0;
};

}  // namespace cpt::exec
