#include "costmodel/work_pricing.h"

#include <algorithm>
#include <array>

#include "costmodel/collective_model.h"
#include "costmodel/straggler.h"
#include "costmodel/token_dispatch.h"
#include "core/check.h"

namespace cpt::cost {

using core::Seconds;

GroupPlacements::GroupPlacements(const LayoutCosts& layout, const spec::ParallelConfig& p)
    : layout_(&layout), hybrid_(p.hybrid_shard), pp_(p.pp) {
  // Gradients are summed and ZeRO shards spread over the dp × cp replicas (Megatron's
  // data-and-context-parallel group; cpt's executor's replica group); hybrid sharding shards
  // inside each node and all-reduces the shards across nodes.
  if (hybrid_) {
    const GroupPlacement& r = layout.replicas;
    hybrid_shard_ = GroupPlacement{r.ranks_per_node, 1, r.ranks_per_node, r.intra, {}, r.intra_scale};
    replicate_ = GroupPlacement{r.nodes, r.nodes, 1, {}, r.inter};
  }
}

const GroupPlacement& GroupPlacements::of(CommGroup group) const {
  switch (group) {
    case CommGroup::kTp:
      return layout_->tp;
    case CommGroup::kCp:
      return layout_->cp;
    case CommGroup::kReplicas:
      return layout_->replicas;
    case CommGroup::kShard:
      return hybrid_ ? hybrid_shard_ : layout_->replicas;
    case CommGroup::kReplicate:
      return replicate_;
    case CommGroup::kPp:
      return layout_->pp_in_node;
    case CommGroup::kExpert:
      return layout_->ep;
    case CommGroup::kExpertTp:
      return layout_->etp;
    case CommGroup::kExpertReplicas:
      return layout_->expert_replicas;
  }
  return layout_->tp;
}

PricingContext pricing_context(const GroupPlacements& groups, const spec::ClusterSpec& cluster,
                               const CostModelOptions& options, const spec::ExpertSpec* experts) {
  return {&groups, &options, cluster.node.compute_lost_resuming_from_call.value_or(Seconds(0)),
          cluster.node.scalar_all_reduce_step_latency, experts};
}

namespace {

// One latency-bound all-reduce of a few bytes: inside a node at the node's measured scalar
// latency where it has one (a backend may take another path for a few bytes than the link's fit
// describes); over pp across nodes (the pp groups are not placed there) 2(pp − 1) hops of the
// pipeline's own ring at their mean latency. Zero on a group of one.
Seconds scalar_all_reduce(const WorkItem& item, const PricingContext& context) {
  const GroupPlacements& groups = *context.groups;
  const GroupPlacement& group = groups.of(item.group);
  const LinkSum& ring = groups.layout().pp_ring;
  if (group.size > 1) {
    return context.scalar_step_latency && group.nodes <= 1
               ? *context.scalar_step_latency * (2.0 * (group.size - 1))
               : collective_time(Collective::kAllReduce, item.bytes, group, context.options->network_efficiency);
  }
  if (item.group == CommGroup::kPp && ring.links > 0) {
    return Seconds(ring.latency_s / static_cast<double>(ring.links)) * (2.0 * (groups.pp() - 1));
  }
  return Seconds(-1);  // nothing to do
}

// α–β of one operation of `item`; negative when the group has a single rank.
Seconds operation_time(const WorkItem& item, const PricingContext& context) {
  const GroupPlacement& group = context.groups->of(item.group);
  const double efficiency = context.options->network_efficiency;
  switch (item.kind) {
    case WorkKind::kAllReduce:
      return collective_time(Collective::kAllReduce, item.bytes, group, efficiency);
    case WorkKind::kAllGather:
      return collective_time(Collective::kAllGather, item.bytes, group, efficiency);
    case WorkKind::kReduceScatter:
      return collective_time(Collective::kReduceScatter, item.bytes, group, efficiency);
    case WorkKind::kReduceScatterAllGather:
      // The ring all-reduce's time, or apart where the node measured them apart
      // (GroupPlacement::intra_scale); the all-reduce may take the tree, the pair may not.
      return collective_time(Collective::kReduceScatter, item.bytes, group, efficiency) +
             collective_time(Collective::kAllGather, item.bytes, group, efficiency);
    case WorkKind::kSendReceive: {
      const CallScale& inside = group.intra_scale[static_cast<std::size_t>(spec::LinkCall::kSendRecv)];
      const LinkCost link = group.nodes > 1
                                ? group.inter
                                : LinkCost{core::BytesPerSecond(group.intra.bandwidth.value() * inside.bandwidth),
                                           group.intra.latency * inside.latency};
      return p2p_time(item.bytes, link, efficiency);
    }
    case WorkKind::kScalarAllReduce:
      return scalar_all_reduce(item, context);
    case WorkKind::kAllToAll:
      return collective_time(Collective::kAllToAll, item.bytes, group, efficiency);
    case WorkKind::kFlexDispatch:
      CPT_CHECK(context.experts != nullptr, "a flex dispatch priced without the model's experts");
      return flex_dispatch_time(item.bytes, *context.experts, group, efficiency);
  }
  return Seconds(0);
}

// price() given the operation's α–β time (negative: a group of one).
Seconds price_with(const WorkItem& item, Seconds operation, const PricingContext& context, Seconds segment) {
  if (operation.value() < 0) return Seconds(0);
  const CostModelOptions& o = *context.options;
  Seconds total = operation * item.operations + o.collective_overhead * item.call_overheads;
  if (item.waits_for_slowest && o.compute_jitter_sqrt_s > 0) {
    total += straggler_wait(o.compute_jitter_sqrt_s, segment, context.groups->of(item.group).size) * item.operations;
  }
  return total;
}

// Operation times already computed for one configuration: a layer's passes, the embedding and
// the head repeat the same few collectives (the planner's hot path prices each once).
class OperationTimes {
 public:
  explicit OperationTimes(const PricingContext& context) : context_(context) {}
  Seconds operator()(const WorkItem& item) {
    for (int i = 0; i < size_; ++i) {
      const Known& k = known_[static_cast<std::size_t>(i)];
      if (k.kind == item.kind && k.group == item.group && k.bytes == item.bytes) return k.seconds;
    }
    const Seconds seconds = operation_time(item, context_);
    if (size_ < static_cast<int>(known_.size()))
      known_[static_cast<std::size_t>(size_++)] = {item.kind, item.group, item.bytes, seconds};
    return seconds;
  }

 private:
  struct Known {
    WorkKind kind;
    CommGroup group;
    core::Bytes bytes;
    Seconds seconds;
  };
  const PricingContext& context_;
  std::array<Known, 12> known_;
  int size_ = 0;
};

}  // namespace

Seconds price(const WorkItem& item, const PricingContext& context, Seconds segment) {
  return price_with(item, operation_time(item, context), context, segment);
}

Seconds pipeline_transfer_time(const WorkItem& item, const LinkCost& link, const PricingContext& context) {
  const CostModelOptions& o = *context.options;
  return (p2p_time(item.bytes, link, o.network_efficiency) + o.collective_overhead) * item.operations;
}

namespace {

bool layer_scope(WorkScope scope) {
  return scope == WorkScope::kLayer || scope == WorkScope::kDenseLayer || scope == WorkScope::kMoeLayer;
}

// Whether an entry of `scope` runs on a layer of `kind`.
bool runs_on(WorkScope scope, LayerKind kind) {
  return scope == WorkScope::kLayer || (scope == WorkScope::kDenseLayer && kind == LayerKind::kDense) ||
         (scope == WorkScope::kMoeLayer && kind == LayerKind::kMoe);
}

bool in_microbatch(const WorkItem& item) {
  return (layer_scope(item.scope) || item.scope == WorkScope::kEmbedding || item.scope == WorkScope::kHead) &&
         item.exposure != Exposure::kBehindBackward && item.exposure != Exposure::kAfterBackward;
}

// The pipeline's transfer of one pass of one microbatch (none without pp). KL distillation's
// teacher sends its hidden states in the forward beside the student's; the pipeline prices one
// transfer per pass, so they are spread over both passes: the step's total is theirs.
std::optional<WorkItem> pass_transfer(const StepInventory& inventory) {
  std::optional<WorkItem> transfer;
  double teacher_transfers = 0;
  for (const WorkItem& item : inventory.items()) {
    if (item.scope != WorkScope::kTransfer) continue;
    if (item.pass == WorkPass::kTeacher) {
      teacher_transfers = item.calls;
    } else {
      transfer = item;
    }
  }
  if (transfer) transfer->operations *= 1 + teacher_transfers / 2;
  return transfer;
}

PassTime& layer_pass_of(BlockCosts& block, const WorkItem& item) {
  if (item.pass == WorkPass::kTeacher) return block.teacher;
  if (item.pass == WorkPass::kForward) return block.forward;
  return item.pass == WorkPass::kRecompute ? block.recompute : block.backward;
}

PassTime& root_pass_of(HeadCosts& head, const WorkItem& item) {
  const bool forward = item.pass == WorkPass::kForward;
  const bool teacher = item.pass == WorkPass::kTeacher;
  if (item.scope == WorkScope::kEmbedding) {
    return teacher ? head.teacher_embedding : forward ? head.embedding_forward : head.embedding_backward;
  }
  return teacher ? head.teacher_head : forward ? head.head_forward : head.head_backward;
}

void charge_call(PassTime& pass, const WorkItem& item, const PricingContext& context) {
  pass.kernels += item.kernels;
  pass.overhead += context.options->kernel_overhead * item.kernels;
  if (item.resumes) pass.resume += context.resume * item.calls;
}

// The compute of a layer's passes and the operations among its entries that wait for their group:
// their ratio is the compute each waiting operation follows.
struct Segments {
  Seconds compute;
  double waiting = 0;
  [[nodiscard]] Seconds per_wait() const { return waiting > 0 ? compute / waiting : Seconds(0); }
};

// The kernels around each call of a layer of `kind` run in its pass, and a host resumes after each
// blocking call.
Segments charge_layer_dispatch(BlockCosts& block, LayerKind kind, const StepInventory& inventory,
                               const PricingContext& context) {
  Segments segments;
  for (const WorkItem& item : inventory.items()) {
    if (!in_microbatch(item) || !runs_on(item.scope, kind)) continue;
    charge_call(layer_pass_of(block, item), item, context);
    if (item.waits_for_slowest) segments.waiting += item.operations;
  }
  segments.compute = block.forward.total() + block.backward.total() + block.recompute.total() + block.teacher.total();
  return segments;
}

// Seconds by pass (forward, backward, recompute, teacher) of one scope's entries.
using ByPass = std::array<Seconds, 4>;

struct ScopeSums {
  ByPass tp{}, cp{}, ep{}, behind_attention{}, prefetched{};
};

bool expert_group(CommGroup group) {
  return group == CommGroup::kExpert || group == CommGroup::kExpertTp || group == CommGroup::kExpertReplicas;
}

void add_to(ScopeSums& sums, const WorkItem& item, Seconds seconds) {
  const auto pass = static_cast<std::size_t>(item.pass);
  switch (item.exposure) {
    case Exposure::kBehindAttention:
      sums.behind_attention[pass] += seconds;
      break;
    case Exposure::kPrefetched:
      sums.prefetched[pass] += seconds;
      break;
    default:
      (item.group == CommGroup::kCp ? sums.cp : expert_group(item.group) ? sums.ep : sums.tp)[pass] += seconds;
  }
}

constexpr auto kForward = static_cast<std::size_t>(WorkPass::kForward);
constexpr auto kBackward = static_cast<std::size_t>(WorkPass::kBackward);
constexpr auto kRecompute = static_cast<std::size_t>(WorkPass::kRecompute);
constexpr auto kTeacher = static_cast<std::size_t>(WorkPass::kTeacher);

// One layer's charges into `c` from its compute (c.block) and its entries' seconds.
void fold_layer(const ScopeSums& layer, LayerCharges& c) {
  const BlockCosts& block = c.block;
  const Seconds cp_forward =
      layer.cp[kForward] + std::max(Seconds(0), layer.behind_attention[kForward] - block.forward.attention);
  const Seconds cp_backward = layer.cp[kBackward] + layer.cp[kRecompute] +
                              std::max(Seconds(0), layer.behind_attention[kBackward] - block.backward.attention);
  const Seconds zero3_forward = std::max(Seconds(0), layer.prefetched[kForward] - block.forward.total());
  const Seconds zero3_backward =
      std::max(Seconds(0), layer.prefetched[kBackward] - block.backward.total() - block.recompute.total());
  // The teacher's forward, after the student's (its exposure priced as a forward's).
  const Seconds cp_teacher =
      layer.cp[kTeacher] + std::max(Seconds(0), layer.behind_attention[kTeacher] - block.teacher.attention);
  const Seconds zero3_teacher = std::max(Seconds(0), layer.prefetched[kTeacher] - block.teacher.total());
  c.zero3_hidden_forward = layer.prefetched[kForward] - zero3_forward + layer.prefetched[kTeacher] - zero3_teacher;
  c.zero3_hidden_backward = layer.prefetched[kBackward] - zero3_backward;
  c.zero3_hidden = c.zero3_hidden_forward + c.zero3_hidden_backward;
  c.tp = layer.tp[kForward] + layer.tp[kBackward] + layer.tp[kRecompute] + layer.tp[kTeacher];
  c.cp = cp_forward + cp_backward + cp_teacher;
  c.ep = layer.ep[kForward] + layer.ep[kBackward] + layer.ep[kRecompute] + layer.ep[kTeacher];
  c.zero3 = zero3_forward + zero3_backward + zero3_teacher;
  c.forward = block.forward.total() + layer.tp[kForward] + layer.ep[kForward] + cp_forward + zero3_forward +
              block.teacher.total() + layer.tp[kTeacher] + layer.ep[kTeacher] + cp_teacher + zero3_teacher;
  c.backward = block.backward.total() + block.recompute.total() + layer.tp[kBackward] + layer.tp[kRecompute] +
               layer.ep[kBackward] + layer.ep[kRecompute] + cp_backward + zero3_backward;
}

PassTime scaled(const PassTime& t, double k) {
  return {t.gemm * k, t.attention * k, t.memory * k, t.overhead * k, t.kernels * k, t.resume * k};
}

PassTime plus(const PassTime& a, const PassTime& b) {
  return {a.gemm + b.gemm,         a.attention + b.attention, a.memory + b.memory,
          a.overhead + b.overhead, a.kernels + b.kernels,     a.resume + b.resume};
}

}  // namespace

LayerCharges LayerCharges::times(double n) const {
  LayerCharges c;
  c.block.forward = scaled(block.forward, n);
  c.block.backward = scaled(block.backward, n);
  c.block.recompute = scaled(block.recompute, n);
  c.block.teacher = scaled(block.teacher, n);
  c.block.model_flops = block.model_flops * n;
  c.block.hardware_flops = block.hardware_flops * n;
  c.tp = tp * n;
  c.cp = cp * n;
  c.zero3 = zero3 * n;
  c.ep = ep * n;
  c.zero3_hidden = zero3_hidden * n;
  c.zero3_hidden_forward = zero3_hidden_forward * n;
  c.zero3_hidden_backward = zero3_hidden_backward * n;
  c.forward = forward * n;
  c.backward = backward * n;
  return c;
}

LayerCharges LayerCharges::sum(const LayerCharges& a, double na, const LayerCharges& b, double nb) {
  auto pass = [&](PassTime BlockCosts::*member) {
    return plus(scaled(a.block.*member, na), scaled(b.block.*member, nb));
  };
  auto seconds = [&](Seconds LayerCharges::*member) { return a.*member * na + b.*member * nb; };
  LayerCharges c;
  c.block.forward = pass(&BlockCosts::forward);
  c.block.backward = pass(&BlockCosts::backward);
  c.block.recompute = pass(&BlockCosts::recompute);
  c.block.teacher = pass(&BlockCosts::teacher);
  c.block.model_flops = a.block.model_flops * na + b.block.model_flops * nb;
  c.block.hardware_flops = a.block.hardware_flops * na + b.block.hardware_flops * nb;
  for (Seconds LayerCharges::*member :
       {&LayerCharges::tp, &LayerCharges::cp, &LayerCharges::zero3, &LayerCharges::ep, &LayerCharges::zero3_hidden,
        &LayerCharges::zero3_hidden_forward, &LayerCharges::zero3_hidden_backward, &LayerCharges::forward,
        &LayerCharges::backward}) {
    c.*member = seconds(member);
  }
  return c;
}

LayerCharges layers_of(const MicrobatchCharges& charges, const RankShare& share) {
  // One kind alone (every layer of most models) scales one layer's charges.
  if (share.moe_layers == 0) return charges.dense_layer.times(share.layers);
  if (share.moe_layers == share.layers) return charges.moe_layer.times(share.layers);
  return LayerCharges::sum(charges.dense_layer, share.layers - share.moe_layers, charges.moe_layer, share.moe_layers);
}

MicrobatchCharges price_microbatch(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                   const spec::ParallelConfig& p, int seq_len, const CostModelOptions& o,
                                   const StepInventory& inventory, const PricingContext& context) {
  MicrobatchCharges c;
  c.head = head_costs(model, p, seq_len, cluster.gpu(), o);
  c.resume = context.resume;
  c.transfer = pass_transfer(inventory);
  const double moe_layers = model.moe_layers_in(0, model.layers);
  const double layers_of_kind[2] = {model.layers - moe_layers, moe_layers};
  // Each kind's compute and its own kernels and resumes; the embedding's and head's entries follow
  // the mean layer's compute per waiting operation.
  LayerCharges* layer_charges[2] = {&c.dense_layer, &c.moe_layer};
  Segments segments[2], mean;
  for (const LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
    const auto k = static_cast<std::size_t>(kind);
    if (layers_of_kind[k] == 0) continue;
    BlockCosts& block = layer_charges[k]->block;
    block = block_costs(model, p, seq_len, cluster.gpu(), o, kind);
    segments[k] = charge_layer_dispatch(block, kind, inventory, context);
    mean.compute += segments[k].compute * layers_of_kind[k];
    mean.waiting += segments[k].waiting * layers_of_kind[k];
  }
  ScopeSums layer[2], embedding, head;
  OperationTimes operation_times(context);
  for (const WorkItem& item : inventory.items()) {
    if (!in_microbatch(item)) continue;
    if (layer_scope(item.scope)) {
      for (const LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {
        const auto k = static_cast<std::size_t>(kind);
        if (layers_of_kind[k] == 0 || !runs_on(item.scope, kind)) continue;
        add_to(layer[k], item, price_with(item, operation_times(item), context, segments[k].per_wait()));
      }
      continue;
    }
    charge_call(root_pass_of(c.head, item), item, context);
    const Seconds seconds = price_with(item, operation_times(item), context, mean.per_wait());
    if (item.exposure == Exposure::kBetweenPasses) {
      c.between_passes += seconds;
      continue;
    }
    add_to(item.scope == WorkScope::kEmbedding ? embedding : head, item, seconds);
  }
  if (layers_of_kind[0] > 0) fold_layer(layer[0], c.dense_layer);
  if (layers_of_kind[1] > 0) fold_layer(layer[1], c.moe_layer);
  c.embedding_tp_forward = embedding.tp[kForward] + embedding.tp[kTeacher];
  c.embedding_tp_backward = embedding.tp[kBackward];
  c.head_tp_forward = head.tp[kForward] + head.tp[kTeacher];
  c.head_tp_backward = head.tp[kBackward];
  c.embedding_forward = c.head.embedding_forward.total() + c.head.teacher_embedding.total() + c.embedding_tp_forward;
  c.embedding_backward = c.head.embedding_backward.total() + c.embedding_tp_backward;
  c.head_forward = c.head.head_forward.total() + c.head.teacher_head.total() + c.head_tp_forward;
  c.head_backward = c.head.head_backward.total() + c.head_tp_backward;
  c.chunk_forward = c.head.chunk_entry.total() + c.head.teacher_chunk_entry.total();
  c.batch_forward = c.head.batch_entry.total();
  // A calibrated node's own slowdown inside it (spec::NodeSpec::overlap_compute_slowdown).
  c.overlap_slowdown = context.groups->of(CommGroup::kReplicas).nodes > 1
                           ? o.overlap_slowdown_network
                           : cluster.node.overlap_compute_slowdown.value_or(o.overlap_slowdown_nvlink);
  return c;
}

}  // namespace cpt::cost
