#include "costmodel/search_ranks.h"

#include <algorithm>

#include "costmodel/collective_model.h"
#include "costmodel/pipeline_replay.h"
#include "spec/pipeline_schedule.h"
#include "spec/stage_partition.h"

namespace cpt::cost {

using core::Seconds;

namespace {

// Stage `stage` of the balanced partition.
HeldLayers balanced_stage(const spec::ModelSpec& model, const spec::ParallelConfig& p, int stage) {
  HeldLayers held;
  held.first_layer = spec::StagePartition::balanced_first_layer(model.layers, p.pp, p.virtual_stages, stage);
  held.layers = spec::StagePartition::balanced_layers_in(model.layers, p.pp, p.virtual_stages, stage);
  held.moe_layers = model.moe_layers_in(held.first_layer, static_cast<int>(held.layers));
  return held;
}

// The stored activations of the heaviest chunk of pipeline rank `r` (for the bound of the inner
// ranks, of any of ranks 1..pp-2).
double heaviest_chunk_bytes(const spec::ModelSpec& model, const spec::ParallelConfig& p, const MemoryTerms& terms,
                            const SearchRanks& ranks, int r) {
  const bool inner_bound = ranks.mixed_layers && r == 1 && p.pp >= 4;
  double heaviest = 0;
  for (int rank = r; rank <= (inner_bound ? p.pp - 2 : r); ++rank) {
    for (int c = 0; c < p.virtual_stages; ++c) {
      heaviest = std::max(heaviest, terms.activations_of(balanced_stage(model, p, c * p.pp + rank)));
    }
  }
  return heaviest;
}

// Seconds of all transfers around the pipeline's ring in one pass of one microbatch: stage s ->
// s+1 for s < S - 1 leaves pp rank s mod pp, so every link of the ring v times but the wrap from
// pp - 1 to 0 once less.
Seconds ring_transfers(const MicrobatchCharges& c, const LayoutCosts& layout_costs, const spec::ParallelConfig& p,
                       const PricingContext& context) {
  if (!c.transfer) return Seconds(0);
  const CostModelOptions& o = *context.options;
  return (p2p_time(c.transfer->bytes, layout_costs.pp_ring, o.network_efficiency) +
          o.collective_overhead * static_cast<double>(p.pp)) *
             static_cast<double>(p.virtual_stages) * c.transfer->operations -
         pipeline_transfer_time(*c.transfer, layout_costs.pp_next.back(), context);
}

}  // namespace

SearchRanks search_ranks(const spec::ModelSpec& model, const spec::ParallelConfig& p) {
  SearchRanks out;
  const int layers = model.layers, pp = p.pp, v = p.virtual_stages;
  const int moe_layers = model.moe_layers_in(0, layers);
  out.mixed_layers = moe_layers > 0 && moe_layers < layers;
  auto moe_layers_of_rank = [&](int r) {
    double moe = 0;
    for (int c = 0; c < v; ++c) moe += balanced_stage(model, p, c * pp + r).moe_layers;
    return moe;
  };
  auto add_rank = [&](int r) {
    RankShare& k = out.ranks[out.count++];
    k.pp_rank = r;
    k.first = r == 0;
    k.last = r == pp - 1;
    k.transfers_per_pass = spec::rank_transfers_per_pass(pp, v, r);
    k.chunks = v;
    k.first_layer = spec::StagePartition::balanced_first_layer(layers, pp, v, r);
    k.layers = spec::StagePartition::balanced_layers_of_rank(layers, pp, v, r);
    k.moe_layers = moe_layers_of_rank(r);
  };
  add_rank(0);
  if (pp >= 3) add_rank(1);
  if (pp >= 2) add_rank(pp - 1);
  out.inner.layers = layers;
  out.inner.moe_layers = moe_layers;
  for (int i = 0; i < out.count; ++i) {
    out.inner.layers -= out.ranks[i].layers;
    out.inner.moe_layers -= out.ranks[i].moe_layers;
  }
  if (out.mixed_layers && pp >= 4) {  // rank 1 as the inner ranks' bound
    RankShare& bound = out.ranks[1];
    for (int r = 2; r < pp - 1; ++r) bound.moe_layers = std::max(bound.moe_layers, moe_layers_of_rank(r));
  }
  return out;
}

void search_memory(const spec::ModelSpec& model, const spec::ParallelConfig& p, int seq_len, int shard_group,
                   const CostModelOptions& o, SearchRanks& ranks, SearchEstimate& out) {
  const auto counts = model.param_counts();
  const double expert_params = expert_params_per_moe_layer(counts, p);
  const MemoryTerms terms = memory_terms(model, p, seq_len, shard_group, o);
  const bool single_stage = p.pp * p.virtual_stages == 1;
  for (int i = 0; i < ranks.count; ++i) {
    RankShare& share = ranks.ranks[i];
    const double root = root_params(model, counts, p.tp, share.first, share.last, single_stage);
    share.params = params_of_layers(counts, p, share.held()) + root;
    share.expert_params = share.moe_layers * expert_params;
    const double activations =
        heaviest_chunk_bytes(model, p, terms, ranks, share.pp_rank) *
        spec::in_flight_closed_form(p.schedule, p.pp, p.virtual_stages, p.grad_accum(), share.pp_rank);
    const MemoryBreakdown memory = rank_memory(terms, p, share.held(), root, activations, share.first, share.last, o);
    if (i == 0 || memory.total() > out.peak_memory.total()) {
      out.peak_memory = memory;
      out.worst_pp_rank = share.pp_rank;
    }
  }
}

CriticalRank search_critical_rank(const SearchRanks& ranks, const MicrobatchCharges& c, const LayoutCosts& layout_costs,
                                  const spec::ParallelConfig& p, const PricingContext& context) {
  const bool zero_bubble = p.schedule == spec::ScheduleKind::kZeroBubbleH1;
  const double resume = c.transfer && c.transfer->resumes ? c.resume.value() : 0.0;
  double work[3], fill[3], backward[3];
  int critical_i = 0;
  for (int i = 0; i < ranks.count; ++i) {
    const RankShare& k = ranks.ranks[i];
    const LayerCharges layers = layers_of(c, k);
    double f = layers.forward.value() + k.chunks * c.chunk_forward.value(), b = layers.backward.value(),
           w = layers.block.forward.gemm.value();
    if (k.first) {
      f += c.embedding_forward.value();
      b += c.embedding_backward.value();
    }
    if (k.last) {
      f += c.head_forward.value();
      b += c.head_backward.value();
      w += c.head.head_forward.gemm.value();
    }
    // Resuming from its receives and sends, as evaluate()'s stage durations.
    f += resume * k.transfers_per_pass;
    b += resume * k.transfers_per_pass;
    work[i] = f + b;
    backward[i] = b;
    fill[i] = bubble_fill(f, b, w, zero_bubble);
    if (work[i] > work[critical_i]) critical_i = i;
  }
  // The inner ranks' layers, and their chunks' entries (adding to f adds to either fill's branch).
  auto fill_of = [&](const LayerCharges& layer) {
    return bubble_fill(layer.forward.value(), layer.backward.value(), layer.block.forward.gemm.value(), zero_bubble);
  };
  double others = (ranks.inner.layers - ranks.inner.moe_layers) * fill_of(c.dense_layer) +
                  ranks.inner.moe_layers * fill_of(c.moe_layer) +
                  (p.pp - ranks.count) * p.virtual_stages * c.chunk_forward.value();
  for (int i = 0; i < ranks.count; ++i) others += i == critical_i ? 0.0 : fill[i];
  const PipelineTerms pipe = closed_form_terms(p.virtual_stages, p.grad_accum(), work[critical_i], others,
                                               ring_transfers(c, layout_costs, p, context).value());
  CriticalRank critical;
  critical.share = ranks.ranks[critical_i];
  critical.backward_s = backward[critical_i];
  critical.finisher = critical.share;
  critical.finisher_backward_s = critical.backward_s;
  critical.pp_comm = Seconds(pipe.transfers_s);
  critical.pp_bubble = Seconds(std::max(0.0, pipe.bubble_s));
  return critical;
}

}  // namespace cpt::cost
