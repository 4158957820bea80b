#pragma once
// Prices a step inventory (costmodel/step_inventory.h) once: α–β per operation
// (collective_model.h), CostModelOptions::collective_overhead per call overhead, the wait for the
// group's slowest rank (straggler.h), the compute a host loses resuming from each blocking call
// (NodeSpec::compute_lost_resuming_from_call) and CostModelOptions::kernel_overhead per kernel
// dispatched around the calls. price_microbatch() folds the entries of one microbatch into what
// each pass of a layer, the embedding and the head costs with what it cannot hide; the step's end
// is folded in costmodel/step_end.h.

#include <optional>

#include "core/units.h"
#include "costmodel/cost_options.h"
#include "costmodel/layer_costs.h"
#include "costmodel/step_inventory.h"
#include "costmodel/topology.h"
#include "spec/hardware_spec.h"

namespace cpt::cost {

// Where each CommGroup runs for one configuration: Topology::layout_costs' placements, and the
// two groups hybrid sharding makes of the replicas. REQUIRES: `layout` outlives it.
class GroupPlacements {
 public:
  GroupPlacements(const LayoutCosts& layout, const spec::ParallelConfig& parallel);
  [[nodiscard]] const GroupPlacement& of(CommGroup group) const;
  [[nodiscard]] const LayoutCosts& layout() const { return *layout_; }
  [[nodiscard]] int pp() const { return pp_; }

 private:
  const LayoutCosts* layout_;
  bool hybrid_ = false;
  GroupPlacement hybrid_shard_, replicate_;  // with hybrid sharding; replicate_ has one rank without
  int pp_ = 1;
};

// What pricing needs beside the entries.
struct PricingContext {
  const GroupPlacements* groups = nullptr;
  const CostModelOptions* options = nullptr;
  core::Seconds resume;                              // per blocking call (0 unless the node measured it)
  std::optional<core::Seconds> scalar_step_latency;  // NodeSpec::scalar_all_reduce_step_latency
  const spec::ExpertSpec* experts = nullptr;         // the model's, for WorkKind::kFlexDispatch
};
// REQUIRES: `experts` (where given) outlives the context.
[[nodiscard]] PricingContext pricing_context(const GroupPlacements& groups, const spec::ClusterSpec& cluster,
                                             const CostModelOptions& options,
                                             const spec::ExpertSpec* experts = nullptr);

// Seconds of one unit of `item` (its operations, overheads and waits) when each waiting operation
// follows `segment` of compute since its group's previous call. Transfers (WorkScope::kTransfer)
// are priced per stage link by the pipeline (pipeline_transfer_time).
[[nodiscard]] core::Seconds price(const WorkItem& item, const PricingContext& context, core::Seconds segment);

// One pipeline transfer of `item` over `link`.
[[nodiscard]] core::Seconds pipeline_transfer_time(const WorkItem& item, const LinkCost& link,
                                                   const PricingContext& context);

// Layers of one microbatch: the compute of each pass with the kernels and resumes of its calls, and
// the communication it cannot hide. One layer's, or (LayerCharges::sum) a stage's or a rank's.
struct LayerCharges {
  BlockCosts block;
  // Exposed communication over all the passes, by group: tensor parallelism (its blocking calls),
  // context parallelism (gathers, or the ring beyond the attention core), ZeRO-3 (gathers and
  // reduce-scatters beyond the pass's compute).
  core::Seconds tp, cp, zero3;
  core::Seconds ep;            // expert parallelism's all-to-alls (and etp's gathers), blocking
  core::Seconds zero3_hidden;  // ZeRO-3 communication hidden behind the compute
  core::Seconds zero3_hidden_forward, zero3_hidden_backward;
  core::Seconds forward, backward;  // compute + exposed, backward with recompute

  // `n` such layers: every term times n.
  [[nodiscard]] LayerCharges times(double n) const;
  // `dense` dense layers and `moe` MoE layers: every term times its count, summed.
  static LayerCharges sum(const LayerCharges& dense_layer, double dense, const LayerCharges& moe_layer, double moe);
};

// One microbatch on any stage: its layers' charges by kind (spec::ModelSpec::is_moe_layer; a kind
// the model lacks is left zero), and the embedding's and head's.
struct MicrobatchCharges {
  LayerCharges dense_layer, moe_layer;
  HeadCosts head;
  // The embedding's and head's tensor-parallel calls, per pass.
  core::Seconds embedding_tp_forward, embedding_tp_backward, head_tp_forward, head_tp_backward;
  // What the stage holding the embedding (the head) adds per pass: compute + its calls.
  core::Seconds embedding_forward, embedding_backward, head_forward, head_backward;
  core::Seconds chunk_forward;       // what each model chunk adds to its forward (HeadCosts::chunk_entry)
  core::Seconds batch_forward;       // what each pipeline rank adds to its forward (HeadCosts::batch_entry)
  core::Seconds between_passes;      // WorkScope::kEmbedding entries run between passes (the root unit)
  std::optional<WorkItem> transfer;  // the pipeline's transfer of one pass (none without pp)
  core::Seconds resume;              // per blocking call
  double overlap_slowdown = 0;       // compute slowdown per second of overlapped data-parallel traffic
};

// REQUIRES: `inventory` from microbatch_work.
[[nodiscard]] MicrobatchCharges price_microbatch(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                                 const spec::ParallelConfig& parallel, int seq_len,
                                                 const CostModelOptions& options, const StepInventory& inventory,
                                                 const PricingContext& context);

// The charges of `share`'s layers (RankShare::layers, of them RankShare::moe_layers MoE).
[[nodiscard]] LayerCharges layers_of(const MicrobatchCharges& charges, const RankShare& share);

}  // namespace cpt::cost
