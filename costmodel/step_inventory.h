#pragma once
// The communication work of one training step, as data: what each pass of a layer, of the
// embedding and of the LM head, each pipeline transfer and the step's end send or gather, over
// which group, how often, how it meets compute, and the kernels dispatched around it. A runtime
// is the function that produces this inventory (step_inventory_for: Megatron-style fused kernels,
// cpt's own executor); costmodel/work_pricing.h prices it once, and evaluate(), evaluate_search(),
// the simulator's stage durations, Estimate::calls_per_step and Estimate::kernels_per_step are
// folds over the priced entries. The compute of each pass is costmodel/layer_costs.h's.
//
// Fixed capacity and no allocation: the planner builds one per configuration it evaluates.

#include <array>
#include <cstdint>
#include <span>

#include "core/units.h"
#include "costmodel/cost_options.h"
#include "costmodel/layer_kind.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::cost {

// kTeacher: KL distillation's frozen teacher, forward on every microbatch (CostModelOptions::
// distill_teacher).
enum class WorkPass : std::uint8_t { kForward, kBackward, kRecompute, kTeacher, kStepEnd };

// What an entry's counts are per; WorkShare::times gives how often a rank runs them in a step.
enum class WorkScope : std::uint8_t {
  kLayer,       // each layer the rank holds, each microbatch
  kDenseLayer,  // each of those without routed experts (spec::ModelSpec::is_moe_layer false)
  kMoeLayer,    // each of those with routed experts
  kEmbedding,   // each microbatch, on the rank holding the embedding (and ZeRO-3's root unit)
  kHead,        // each microbatch, on the rank holding the final norm, LM head and loss
  kTransfer,    // each pipeline send or receive the rank makes in one pass of one microbatch
  kReduction,   // each gradient reduction of the step (StepInventory::gradient_reductions)
  kStep,        // once per step
};

// The process group an entry runs on (costmodel/work_pricing.h's GroupPlacements).
enum class CommGroup : std::uint8_t {
  kTp,
  kCp,
  kReplicas,   // the dp × cp ranks that hold the same parameters
  kShard,      // the ZeRO shard group (inside a node under hybrid sharding)
  kReplicate,  // hybrid sharding: the same shard on every node
  kPp,
  kExpert,          // the ep group: the routed tokens' all-to-all (ParallelConfig::ep)
  kExpertTp,        // the etp group: an expert's MLP split like tp
  kExpertReplicas,  // expert-dp: the ranks holding the same expert shard
};

enum class WorkKind : std::uint8_t {
  kAllReduce,
  kAllGather,               // `bytes`: the gathered result
  kReduceScatter,           // `bytes`: the full input
  kReduceScatterAllGather,  // sequence parallelism's pair in place of one all-reduce
  kSendReceive,             // point to point to the next rank of the group's ring
  kScalarAllReduce,         // a few bytes, bound by latency (the step's loss, token count, norm)
  kAllToAll,                // `bytes`: what one rank sends to the whole group (its own share included)
  kFlexDispatch,            // `bytes`: a rank's tokens, each once (costmodel/token_dispatch.h)
};

// How an entry meets the compute beside it.
enum class Exposure : std::uint8_t {
  kBlocking,         // the caller waits for it: all of it is on the critical path
  kBehindAttention,  // context parallelism's ring: hidden behind the pass's attention core
  kPrefetched,       // ZeRO-3's gathers and reduce-scatters: hidden behind the pass's compute
  kBehindBackward,   // the gradient reduction, in buckets behind the last backward
  kAfterBackward,    // after the reduction: ZeRO-1/2's all-gather, the hybrid all-reduce
  kBetweenPasses,    // between a microbatch's passes, nothing beside it (the executor's root unit)
};

// Trivial (no default member initializers), so that an inventory's storage costs nothing to
// create; `WorkItem{...}` zero-fills what a designated initializer leaves out.
struct WorkItem {
  WorkPass pass;
  WorkScope scope;
  CommGroup group;
  WorkKind kind;
  Exposure exposure;
  // Bytes of one operation: the reduced buffer, the gathered result, one transfer.
  core::Bytes bytes;
  // Per unit of `scope`: operations priced α–β on `bytes` each; collective_overhead paid (a
  // bucketed reduction is one α–β over all its bytes and one overhead per bucket; a sequence-
  // parallel pair one overhead for two calls, as collective_overhead was fitted per Megatron
  // collective); calls started, as the executor's timed communicator counts them; kernels
  // dispatched around them (costmodel/kernel_dispatch.h).
  double operations;
  double call_overheads;
  double calls;
  double kernels;
  bool waits_for_slowest;  // each operation waits for the group's slowest rank (straggler.h)
  bool resumes;            // each call costs the host NodeSpec::compute_lost_resuming_from_call
};

// Enough for every producer at once (StepInventory.EveryParallelismAtOnceFitsTheInventory).
inline constexpr int kMaxWorkItems = 80;

class StepInventory {
 public:
  // REQUIRES: fewer than kMaxWorkItems entries so far (a producer's fixed set); checked.
  void add(const WorkItem& item);
  [[nodiscard]] std::span<const WorkItem> items() const { return {items_.data(), static_cast<std::size_t>(size_)}; }

  // Set by add_step_end_work:
  int gradient_reductions = 1;  // per step: 1, or each microbatch (ZeRO-2 without accumulation)
  double gradient_buckets = 1;  // per reduction
  // Of gradient_buckets, the routed experts' own where they reduce apart (over expert-dp); < 0:
  // split in proportion to their parameters (Megatron's buckets).
  double expert_gradient_buckets = -1;
  bool reduces_gradients = false;  // data-parallel work at the step's end (its last call waits)
  double optimizer_segments = 0;   // the executor's ZeRO-1/2: BucketStats::busiest_segments

 private:
  std::array<WorkItem, kMaxWorkItems> items_;  // the first size_ are set
  int size_ = 0;
};

// What a pipeline rank holds, for the work that depends on it (the step's end).
struct RankShare {
  int pp_rank = 0;
  double layers = 0;              // blocks over its chunks
  double moe_layers = 0;          // of `layers`, those with routed experts
  int first_layer = 0;            // its first stage's first layer
  double chunks = 1;              // its model chunks (virtual stages)
  bool first = false;             // holds the embedding
  bool last = false;              // holds the final norm and LM head
  double params = 0;              // parameters per tp rank (the routed experts' its own, below)
  double expert_params = 0;       // routed-expert parameters it holds (reduced over expert-dp)
  double transfers_per_pass = 0;  // its pipeline sends and receives in one pass of one microbatch
  [[nodiscard]] HeldLayers held() const { return {layers, moe_layers, first_layer, pp_rank}; }
};

// How often a rank with `share` runs an entry of `scope` in a step of `microbatches`.
[[nodiscard]] inline double times_per_step(WorkScope scope, const RankShare& share, double microbatches,
                                           const StepInventory& inventory) {
  switch (scope) {
    case WorkScope::kLayer:
      return share.layers * microbatches;
    case WorkScope::kDenseLayer:
      return (share.layers - share.moe_layers) * microbatches;
    case WorkScope::kMoeLayer:
      return share.moe_layers * microbatches;
    case WorkScope::kEmbedding:
      return share.first ? microbatches : 0.0;
    case WorkScope::kHead:
      return share.last ? microbatches : 0.0;
    case WorkScope::kTransfer:
      return share.transfers_per_pass * microbatches;
    case WorkScope::kReduction:
      return inventory.gradient_reductions;
    case WorkScope::kStep:
      return 1.0;
  }
  return 0.0;
}

// The work of every microbatch (layers, embedding, head, pipeline transfers) for `parallel` under
// the runtime `options.dispatch` names; `shard_group`: spec::RankLayout::zero_shard_group_size.
[[nodiscard]] StepInventory microbatch_work(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                                            int seq_len, int shard_group, const CostModelOptions& options);

// The sizes of the groups the step's end runs on.
struct StepEndGroups {
  int shard_group = 1;     // spec::RankLayout::zero_shard_group_size
  int shard_size = 1;      // the placed shard group (inside a node under hybrid sharding)
  int replicate_size = 1;  // hybrid sharding's replicate group (1 without it)
};

// Adds the step's end on the rank with `share`: gradient reduction, ZeRO-1/2 gather, hybrid
// all-reduce and (cpt's executor) the step's scalar all-reduces.
void add_step_end_work(StepInventory& inventory, const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                       const StepEndGroups& groups, const RankShare& share, const CostModelOptions& options);

}  // namespace cpt::cost
