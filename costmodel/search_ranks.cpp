#include "costmodel/search_ranks.h"

#include <algorithm>
#include <array>

#include "costmodel/collective_model.h"
#include "costmodel/pipeline_replay.h"
#include "spec/pipeline_schedule.h"
#include "spec/stage_partition.h"

namespace cpt::cost {

using core::Seconds;

namespace {

// Stage `stage` of the balanced partition.
HeldLayers balanced_stage(const spec::ModelSpec& model, int pp, int v, int stage) {
  HeldLayers held;
  held.first_layer = spec::StagePartition::balanced_first_layer(model.layers, pp, v, stage);
  held.layers = spec::StagePartition::balanced_layers_in(model.layers, pp, v, stage);
  held.moe_layers = model.moe_layers_in(held.first_layer, static_cast<int>(held.layers));
  return held;
}

// Chunks that can be the heaviest in stored activations, d·a_dense + m·a_moe for any rates: of each
// chunk size (the balanced partition's q or q + 1 layers) the fewest and the most MoE layers.
struct ChunkCandidates {
  int smallest = 0;  // q
  bool present[2] = {};
  double fewest_moe[2] = {}, most_moe[2] = {};
  void add(const HeldLayers& chunk) {
    const auto i = static_cast<std::size_t>(static_cast<int>(chunk.layers) - smallest);
    fewest_moe[i] = present[i] ? std::min(fewest_moe[i], chunk.moe_layers) : chunk.moe_layers;
    most_moe[i] = present[i] ? std::max(most_moe[i], chunk.moe_layers) : chunk.moe_layers;
    present[i] = true;
  }
  [[nodiscard]] double heaviest_bytes(const MemoryTerms& terms) const {
    double heaviest = 0;
    for (std::size_t i = 0; i < 2; ++i) {
      if (!present[i]) continue;
      const double layers = smallest + static_cast<double>(i);
      heaviest = std::max(
          {heaviest, terms.activations_of({layers, fewest_moe[i], 0}), terms.activations_of({layers, most_moe[i], 0})});
    }
    return heaviest;
  }
};

// What the balanced partition puts on the search's ranks (0, 1, pp - 1) by kind for a model whose
// layers mix the kinds: each one's MoE layers and chunk candidates, rank 1's standing for every
// inner rank when pp >= 4 (the most MoE layers any holds, every inner chunk). It depends on the
// layers, the MoE rule and (pp, v) alone, and the planner evaluates many configurations of each
// shape: computed once per shape and thread.
struct MixedShape {
  int layers = 0, first_dense = 0, interval = 0, pp = 0, v = 0;  // the key
  double moe_layers[3] = {};                                     // of ranks 0, 1 and pp - 1
  double inner_most_moe = 0;                                     // of ranks 1..pp-2
  ChunkCandidates chunks[3];  // of ranks 0, 1 (with pp >= 4: of ranks 1..pp-2) and pp - 1
};

MixedShape mixed_shape_of(const spec::ModelSpec& model, int pp, int v) {
  MixedShape shape;
  shape.layers = model.layers;
  shape.first_dense = model.moe.first_dense_layers;
  shape.interval = model.moe.layer_interval;
  shape.pp = pp;
  shape.v = v;
  const int ranks[3] = {0, std::min(1, pp - 1), pp - 1};
  for (std::size_t i = 0; i < 3; ++i) {
    const int first = ranks[i];
    const int last = i == 1 && pp >= 4 ? pp - 2 : first;  // rank 1: every inner rank
    shape.chunks[i].smallest = model.layers / (pp * v);
    for (int r = first; r <= last; ++r) {
      double moe = 0;
      for (int c = 0; c < v; ++c) {
        const HeldLayers chunk = balanced_stage(model, pp, v, c * pp + r);
        moe += chunk.moe_layers;
        shape.chunks[i].add(chunk);
      }
      if (r == first) shape.moe_layers[i] = moe;
      if (i == 1) shape.inner_most_moe = std::max(shape.inner_most_moe, moe);
    }
  }
  return shape;
}

const MixedShape& mixed_shape(const spec::ModelSpec& model, int pp, int v) {
  constexpr std::size_t kShapes = 8;
  thread_local std::array<MixedShape, kShapes> shapes;
  thread_local std::size_t next = 0;
  for (const MixedShape& s : shapes) {
    if (s.layers == model.layers && s.first_dense == model.moe.first_dense_layers &&
        s.interval == model.moe.layer_interval && s.pp == pp && s.v == v) {
      return s;
    }
  }
  MixedShape& slot = shapes[next];
  next = (next + 1) % kShapes;
  slot = mixed_shape_of(model, pp, v);
  return slot;
}

// The stored activations of the heaviest chunk of the rank `ranks.ranks[i]` (for the bound of the
// inner ranks, of any of ranks 1..pp-2).
double heaviest_chunk_bytes(const spec::ModelSpec& model, const spec::ParallelConfig& p, const MemoryTerms& terms,
                            const SearchRanks& ranks, int i) {
  const RankShare& share = ranks.ranks[i];
  if (!ranks.mixed_layers) {  // every chunk of one kind
    const double chunk = ranks.heaviest_chunk[i];
    return terms.activations_of({chunk, share.moe_layers > 0 ? chunk : 0.0, 0});
  }
  const std::size_t slot = share.pp_rank == 0 ? 0 : share.pp_rank == p.pp - 1 ? 2 : 1;
  return mixed_shape(model, p.pp, p.virtual_stages).chunks[slot].heaviest_bytes(terms);
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
  // A rank's MoE layers: all or none of its layers unless the kinds mix.
  const MixedShape* shape = out.mixed_layers ? &mixed_shape(model, pp, v) : nullptr;
  auto moe_layers_of_rank = [&](int r, double rank_layers) {
    if (shape == nullptr) return moe_layers > 0 ? rank_layers : 0.0;
    return shape->moe_layers[r == 0 ? 0 : r == pp - 1 ? 2 : 1];
  };
  auto add_rank = [&](int r) {
    const int i = out.count++;
    RankShare& k = out.ranks[i];
    k.pp_rank = r;
    k.first = r == 0;
    k.last = r == pp - 1;
    k.transfers_per_pass = spec::rank_transfers_per_pass(pp, v, r);
    k.chunks = v;
    for (int c = 0; c < v; ++c) {  // its chunks: stages c * pp + r
      const double chunk = spec::StagePartition::balanced_layers_in(layers, pp, v, c * pp + r);
      k.layers += chunk;
      out.heaviest_chunk[i] = std::max(out.heaviest_chunk[i], chunk);
    }
    k.moe_layers = moe_layers_of_rank(r, k.layers);
    if (out.mixed_layers) k.first_layer = spec::StagePartition::balanced_first_layer(layers, pp, v, r);
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
  if (shape != nullptr && pp >= 4) out.ranks[1].moe_layers = shape->inner_most_moe;  // the inner ranks' bound
  return out;
}

void search_memory(const spec::ModelSpec& model, const spec::ParallelConfig& p, int seq_len, int shard_group,
                   const CostModelOptions& o, SearchRanks& ranks, SearchEstimate& out) {
  const auto counts = model.param_counts();
  const double expert_params = model.moe.present() ? expert_params_per_moe_layer(counts, p) : 0.0;
  const MemoryTerms terms = memory_terms(model, p, seq_len, shard_group, o);
  const bool single_stage = p.pp * p.virtual_stages == 1;
  for (int i = 0; i < ranks.count; ++i) {
    RankShare& share = ranks.ranks[i];
    const double root = root_params(model, counts, p.tp, share.first, share.last, single_stage);
    // The blocks' parameters and their routed experts (apart, or in the MoE blocks' own).
    share.params = terms.blocks_of(share.held()) + share.moe_layers * terms.expert_params + root;
    share.expert_params = share.moe_layers * expert_params;
    const double activations =
        heaviest_chunk_bytes(model, p, terms, ranks, i) *
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
    const double dense = k.layers - k.moe_layers, moe = k.moe_layers;
    const LayerCharges &dense_layer = c.dense_layer, &moe_layer = c.moe_layer;
    double f =
        dense * dense_layer.forward.value() + moe * moe_layer.forward.value() + k.chunks * c.chunk_forward.value();
    double b = dense * dense_layer.backward.value() + moe * moe_layer.backward.value();
    double w = dense * dense_layer.block.forward.gemm.value() + moe * moe_layer.block.forward.gemm.value();
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
  critical.pp_comm = Seconds(pipe.transfers_s);
  critical.pp_bubble = Seconds(std::max(0.0, pipe.bubble_s));
  return critical;
}

}  // namespace cpt::cost
