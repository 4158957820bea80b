#include "costmodel/search_ranks.h"

#include <algorithm>
#include <array>
#include <vector>

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
  held.pp_rank = stage % pp;
  held.first_layer = spec::StagePartition::balanced_first_layer(model.layers, pp, v, stage);
  held.layers = spec::StagePartition::balanced_layers_in(model.layers, pp, v, stage);
  held.moe_layers = model.moe_layers_in(held.first_layer, static_cast<int>(held.layers));
  return held;
}

// The layers of `model` from `a` and from `b` on, `count` of them, are of the same kinds.
bool same_kinds_from(const spec::ModelSpec& model, int a, int b, int count) {
  for (int i = 0; i < count; ++i) {
    if (model.moe_layers_in(a + i, 1) != model.moe_layers_in(b + i, 1)) return false;
  }
  return true;
}

SearchRank search_rank_of(const spec::ModelSpec& model, int pp, int v, int r) {
  SearchRank out;
  RankShare& k = out.share;
  k.pp_rank = r;
  k.first = r == 0;
  k.last = r == pp - 1;
  k.transfers_per_pass = spec::rank_transfers_per_pass(pp, v, r);
  k.chunks = v;
  k.first_layer = spec::StagePartition::balanced_first_layer(model.layers, pp, v, r);
  out.chunks.smallest = model.layers / (pp * v);
  for (int c = 0; c < v; ++c) {  // its chunks: stages c * pp + r
    const HeldLayers chunk = balanced_stage(model, pp, v, c * pp + r);
    k.layers += chunk.layers;
    k.moe_layers += chunk.moe_layers;
    out.chunks.add(chunk);
  }
  return out;
}

// One pipeline shape's ranks (SearchRanks), with its key.
struct PipelineShape {
  int layers = 0, first_dense = 0, interval = 0, pp = 0, v = 0;
  bool moe = false;
  std::vector<SearchRank> ranks;
  [[nodiscard]] bool is_of(const spec::ModelSpec& m, int pipeline, int virtual_stages) const {
    return layers == m.layers && moe == m.moe.present() && first_dense == m.moe.first_dense_layers &&
           interval == m.moe.layer_interval && pp == pipeline && v == virtual_stages;
  }
};

// Rank `rank` is an inner rank like `group`: the same layers of each kind, chunks and kinds in order.
bool alike(const spec::ModelSpec& model, const SearchRank& group, const SearchRank& rank, bool mixed) {
  const RankShare &g = group.share, &k = rank.share;
  return !g.first && g.layers == k.layers && g.moe_layers == k.moe_layers && group.chunks == rank.chunks &&
         (!mixed || same_kinds_from(model, g.first_layer, k.first_layer, static_cast<int>(k.layers)));
}

void build_shape(const spec::ModelSpec& model, int pp, int v, PipelineShape& shape) {
  shape.layers = model.layers;
  shape.moe = model.moe.present();
  shape.first_dense = model.moe.first_dense_layers;
  shape.interval = model.moe.layer_interval;
  shape.pp = pp;
  shape.v = v;
  shape.ranks.clear();
  const int moe_layers = model.moe_layers_in(0, model.layers);
  const bool mixed = moe_layers > 0 && moe_layers < model.layers;
  for (int r = 0; r < pp; ++r) {
    SearchRank rank = search_rank_of(model, pp, v, r);
    const bool inner = r > 0 && r < pp - 1;
    auto group = std::find_if(shape.ranks.begin(), shape.ranks.end(),
                              [&](const SearchRank& g) { return inner && alike(model, g, rank, mixed); });
    if (group != shape.ranks.end()) {
      ++group->alike;
      continue;
    }
    // One kind of layer: an earlier inner rank with as many layers and as heavy chunks bounds it.
    rank.memory_bounded =
        inner && !mixed && std::any_of(shape.ranks.begin(), shape.ranks.end(), [&](const SearchRank& g) {
          return !g.share.first && g.share.layers >= rank.share.layers && g.chunks.covers(rank.chunks);
        });
    shape.ranks.push_back(rank);
  }
}

const PipelineShape& pipeline_shape(const spec::ModelSpec& model, int pp, int v) {
  constexpr std::size_t kShapes = 8;
  thread_local std::array<PipelineShape, kShapes> shapes;
  thread_local std::size_t next = 0;
  for (const PipelineShape& s : shapes) {
    if (s.is_of(model, pp, v)) return s;
  }
  PipelineShape& slot = shapes[next];
  next = (next + 1) % kShapes;
  build_shape(model, pp, v, slot);
  return slot;
}

// Sets `share`'s parameters per tp rank as evaluate() prices them (rank_share); returns those
// outside its blocks (root_params).
double set_params(const spec::ModelSpec& model, const spec::ParallelConfig& p, const SearchMemoryTerms& memory,
                  RankShare& share) {
  const bool single_stage = p.pp * p.virtual_stages == 1;
  const double root = root_params(model, memory.counts, p.tp, share.first, share.last, single_stage);
  // The blocks' parameters and their routed experts (apart, or in the MoE blocks' own).
  share.params = memory.terms.blocks_of(share.held()) + share.moe_layers * memory.terms.expert_params + root;
  share.expert_params = share.moe_layers * memory.expert_params_per_moe_layer;
  return root;
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

void ChunkCandidates::add(const HeldLayers& chunk) {
  const auto i = static_cast<std::size_t>(static_cast<int>(chunk.layers) - smallest);
  fewest_moe[i] = present[i] ? std::min(fewest_moe[i], chunk.moe_layers) : chunk.moe_layers;
  most_moe[i] = present[i] ? std::max(most_moe[i], chunk.moe_layers) : chunk.moe_layers;
  present[i] = true;
}

double ChunkCandidates::heaviest_bytes(const MemoryTerms& terms) const {
  double heaviest = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    if (!present[i]) continue;
    const double layers = smallest + static_cast<double>(i);
    heaviest = std::max(
        {heaviest, terms.activations_of({layers, fewest_moe[i], 0}), terms.activations_of({layers, most_moe[i], 0})});
  }
  return heaviest;
}

bool ChunkCandidates::covers(const ChunkCandidates& other) const {
  // (layers, moe) bounds (layers', moe') when it has as many MoE layers and as many dense ones.
  auto covered = [&](double layers, double moe) {
    for (std::size_t j = 0; j < 2; ++j) {
      if (!present[j]) continue;
      const double own = smallest + static_cast<double>(j);
      for (const double own_moe : {fewest_moe[j], most_moe[j]}) {
        if (own_moe >= moe && own - own_moe >= layers - moe) return true;
      }
    }
    return false;
  };
  for (std::size_t i = 0; i < 2; ++i) {
    if (!other.present[i]) continue;
    const double layers = other.smallest + static_cast<double>(i);
    if (!covered(layers, other.fewest_moe[i]) || !covered(layers, other.most_moe[i])) return false;
  }
  return true;
}

SearchRanks search_ranks(const spec::ModelSpec& model, const spec::ParallelConfig& p) {
  return SearchRanks{pipeline_shape(model, p.pp, p.virtual_stages).ranks};
}

SearchMemoryTerms search_memory_terms(const spec::ModelSpec& model, const spec::ParallelConfig& p, int seq_len,
                                      int shard_group, const CostModelOptions& o) {
  SearchMemoryTerms out;
  out.terms = memory_terms(model, p, seq_len, shard_group, o);
  out.counts = model.param_counts();
  out.expert_params_per_moe_layer = model.moe.present() ? expert_params_per_moe_layer(out.counts, p) : 0.0;
  return out;
}

void search_memory(const spec::ModelSpec& model, const spec::ParallelConfig& p, const SearchMemoryTerms& memory,
                   const CostModelOptions& o, const SearchRanks& ranks, SearchEstimate& out) {
  bool any = false;
  for (const SearchRank& rank : ranks.ranks) {
    if (rank.memory_bounded) continue;
    RankShare share = rank.share;
    const double root = set_params(model, p, memory, share);
    const double activations =
        rank.chunks.heaviest_bytes(memory.terms) *
        spec::in_flight_closed_form(p.schedule, p.pp, p.virtual_stages, p.grad_accum(), share.pp_rank);
    const MemoryBreakdown peak =
        rank_memory(memory.terms, p, share.held(), root, activations, share.first, share.last, o);
    if (!any || peak.total() > out.peak_memory.total()) {
      out.peak_memory = peak;
      out.worst_pp_rank = share.pp_rank;
      any = true;
    }
  }
}

CriticalRank search_critical_rank(const spec::ModelSpec& model, const SearchMemoryTerms& memory,
                                  const SearchRanks& ranks, const MicrobatchCharges& c, const LayoutCosts& layout_costs,
                                  const spec::ParallelConfig& p, const PricingContext& context) {
  const bool zero_bubble = p.schedule == spec::ScheduleKind::kZeroBubbleH1;
  const double resume = c.transfer && c.transfer->resumes ? c.resume.value() : 0.0;
  // Each rank's forward and backward over its chunks, one microbatch, as evaluate()'s stage
  // durations sum them; the first of the busiest is critical, the others fill its bubble.
  double critical_work = -1, critical_backward = 0, critical_fill = 0, fills = 0;
  const SearchRank* critical_rank = nullptr;
  for (const SearchRank& rank : ranks.ranks) {
    const RankShare& k = rank.share;
    const double dense = k.layers - k.moe_layers, moe = k.moe_layers;
    double f = dense * c.dense_layer.forward.value() + moe * c.moe_layer.forward.value() +
               k.chunks * c.chunk_forward.value() + c.batch_forward.value();
    double b = dense * c.dense_layer.backward.value() + moe * c.moe_layer.backward.value();
    double w = dense * c.dense_layer.block.forward.gemm.value() + moe * c.moe_layer.block.forward.gemm.value();
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
    const double fill = bubble_fill(f, b, w, zero_bubble);
    fills += rank.alike * fill;
    if (f + b > critical_work) {
      critical_work = f + b;
      critical_backward = b;
      critical_fill = fill;
      critical_rank = &rank;
    }
  }
  const PipelineTerms pipe = closed_form_terms(p.virtual_stages, p.grad_accum(), critical_work, fills - critical_fill,
                                               ring_transfers(c, layout_costs, p, context).value());
  CriticalRank critical;
  critical.share = critical_rank->share;
  (void)set_params(model, p, memory, critical.share);
  critical.backward_s = critical_backward;
  critical.pp_comm = Seconds(pipe.transfers_s);
  critical.pp_bubble = Seconds(std::max(0.0, pipe.bubble_s));
  return critical;
}

}  // namespace cpt::cost
